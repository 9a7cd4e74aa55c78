"""Resuming a run: which checkpoint ``ckpt_path`` names, whether this run can continue it, and
(``actorq resume RUN_DIR``) the overrides that continue a run from its run dir
(:func:`resume_overrides`).

``train()`` calls :func:`find_checkpoint` before anything is built and :func:`check_checkpoint`
once the learner and the actors' precision are known, both before any actor process starts.
A missing, truncated, tampered or foreign checkpoint stops the run with one
:class:`~actorq.util.errors.ConfigError` line (exit code 2). Checkpoints are read with
``torch.load(weights_only=True)``: tensors and plain containers only, never code.

Example:
    >>> from pathlib import Path
    >>> find_checkpoint(None, Path("outputs/run")) is None  # a fresh run
    True
    >>> find_checkpoint("last", Path("/nonexistent/run"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    actorq.util.errors.ConfigError: ckpt_path=last: no checkpoint at /nonexistent/run/checkpoints/last.ckpt; ...
"""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import torch
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from torch import nn

from actorq.util.values import override_value
from actorq.util.errors import ConfigError

LAST = "last"
LAST_CHECKPOINT = Path("checkpoints") / "last.ckpt"
SAVED_OVERRIDES = Path(".hydra") / "overrides.yaml"  # what Hydra saves of a run's command line
EXPERIENCE_STATE = "Experience"  # Lightning saves a datamodule's state under its class name


RUN_OUTPUTS = ("config.yaml", "summary.json", "checkpoints", "tb")
"""What a run writes into its run dir (Hydra's ``.hydra/`` comes before the run starts)."""


def check_new_run_dir(run_dir: Path, resume_from: Path | None) -> None:
    """A ``ConfigError`` unless ``run_dir`` is free for this run: a run that continues a
    checkpoint may write where it likes; a new run refuses a dir that holds another run's
    outputs, whose curves and checkpoints it would mix with its own.

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> check_new_run_dir(run, None)  # an empty dir: free
        >>> _ = (run / "summary.json").write_text("{}")
        >>> check_new_run_dir(run, None)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        actorq.util.errors.ConfigError: run_dir=... holds a run already (summary.json): ...
        >>> check_new_run_dir(run, run / "checkpoints" / "last.ckpt")  # continuing it
    """
    if resume_from is not None or not run_dir.is_dir():
        return
    found = [name for name in RUN_OUTPUTS if (run_dir / name).exists()]
    if found:
        raise ConfigError(f"run_dir={run_dir} holds a run already ({', '.join(found)}): `actorq resume "
                          f"{run_dir}` continues it (ckpt_path=last does from Python); a new run needs a new run_dir")


def save_overrides(run_dir: Path, overrides: list[str]) -> None:
    """Writes ``overrides`` where Hydra saves a run's command line (:data:`SAVED_OVERRIDES`), so
    that a run started from Python resumes and reports as one started by ``actorq train``."""
    path = run_dir / SAVED_OVERRIDES
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(list(overrides), default_flow_style=False, sort_keys=False))


def started_experiment(run_dir: Path) -> str | None:
    """The ``+experiment=NAME`` the run in ``run_dir`` was started with (its saved overrides), or None.

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> started_experiment(run) is None
        True
        >>> save_overrides(run, ["+experiment=ppo_cartpole", "seed=1"])
        >>> started_experiment(run)
        'ppo_cartpole'
    """
    path = run_dir / SAVED_OVERRIDES
    if not path.is_file():
        return None
    for item in yaml.safe_load(path.read_text()) or []:
        key, _, value = str(item).partition("=")
        if key.lstrip("+") == "experiment" and value:
            return value
    return None


def find_checkpoint(ckpt_path: str | None, run_dir: Path) -> Path | None:
    """The checkpoint file to resume from: ``None`` (a fresh run), ``"last"`` (the run dir's
    ``checkpoints/last.ckpt``) or a path; raises a ``ConfigError`` if there is no such file."""
    if ckpt_path is None:
        return None
    if str(ckpt_path) == LAST:
        path = run_dir / "checkpoints" / "last.ckpt"
        if not path.is_file():
            raise ConfigError(f"ckpt_path=last: no checkpoint at {path}; resume with "
                              "run_dir=<the interrupted run's dir> ckpt_path=last")
        return path
    path = Path(str(ckpt_path)).expanduser()
    if not path.is_file():
        raise ConfigError(f"ckpt_path={ckpt_path}: no such file")
    return path


def read_checkpoint(path: Path, label: str | None = None, mmap: bool = False) -> dict:
    """A Lightning checkpoint's contents, read with ``weights_only=True`` (tensors and plain
    containers, never code); a damaged, unsafe or foreign file is a one-line ``ConfigError``
    that starts with ``label`` (default: the path). ``mmap``: tensors are read when used."""
    label = label or str(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as error:
        refused = [line for line in str(error).splitlines() if "GLOBAL" in line]
        raise ConfigError(f"{label}: not a readable checkpoint: it holds more than tensors and plain "
                          f"containers, which weights_only loading refuses ({(refused or ['?'])[0][:150]})") from error
    except Exception as error:  # noqa: BLE001 - any other failure to read: a damaged file
        raise ConfigError(f"{label}: not a readable checkpoint (truncated or damaged?): "
                          f"{type(error).__name__}: {' '.join(str(error).split())[:150]}") from error
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise ConfigError(f"{label}: not a Lightning checkpoint (no state_dict inside)")
    return checkpoint


def load_checkpoint(path: Path) -> dict:
    """The checkpoint a run resumes from (:func:`read_checkpoint`, memory-mapped, so a large
    replay is not read until used); one without the optimizer and loop states a resume needs
    is a ``ConfigError``."""
    checkpoint = read_checkpoint(path, label=f"ckpt_path={path}", mmap=True)
    if "pytorch-lightning_version" not in checkpoint:
        raise ConfigError(f"ckpt_path={path}: not a Lightning checkpoint (no state_dict and version inside)")
    if not {"optimizer_states", "loops"} <= checkpoint.keys():
        raise ConfigError(f"ckpt_path={path}: a weights-only checkpoint (no optimizer and loop states) "
                          "cannot resume a run")
    return checkpoint


def check_checkpoint(checkpoint: dict, path: Path, config: dict, learner: nn.Module, quant) -> None:
    """Raises a ``ConfigError`` unless ``checkpoint`` was written by a run of the same
    algorithm, environment, networks and actor precision as this one, with frames left."""
    saved = (checkpoint.get("datamodule_hyper_parameters") or {}).get("config")
    if not isinstance(saved, dict):
        raise ConfigError(f"ckpt_path={path}: not written by actorq (no run config inside)")
    for group, key in (("algo", "_target_"), ("env", "name")):
        then, now = saved.get(group, {}).get(key), config[group][key]
        if then != now:
            raise ConfigError(f"ckpt_path={path}: the checkpoint is of {group}.{key}={then}, this run has "
                              f"{group}.{key}={now}")
    frames, total = checkpoint.get("actorq", {}).get("frames", 0), config["actors"]["total_frames"]
    if frames >= total:
        raise ConfigError(f"ckpt_path={path}: the checkpoint's run has collected its {frames} frames already "
                          f"(actors.total_frames={total}); nothing is left to resume")
    check_shapes(checkpoint["state_dict"], learner.state_dict(), path)
    then_quant = saved_quant(checkpoint)
    if then_quant is not None and then_quant != dataclasses.asdict(quant):
        raise ConfigError(f"ckpt_path={path}: the checkpoint's actors ran at {then_quant}, this run's at "
                          f"{dataclasses.asdict(quant)}; resume with the same quant settings")


def resumed_precision(checkpoint: dict, quant, budget_planned: bool = False):
    """The actors' precision for a resumed run: with ``quant.bits=auto``, the one the
    checkpoint's run picked (measuring again could pick another); with no ``quant.engine``
    named, the engine its actors ran (:func:`saved_quant`); else ``quant`` itself. A budget
    the plan chose (``quant.max_kl=auto``) is the checkpoint's own (one written before
    ``auto`` chose none for an off-policy learner kept 0.01)."""
    from actorq.quant import QuantSpec

    saved = saved_quant(checkpoint)
    if saved is None:
        return quant
    if budget_planned:
        quant = dataclasses.replace(quant, max_kl=saved.get("max_kl", quant.max_kl))
    if quant.is_auto:
        return QuantSpec(**saved)
    if quant.engine is None and saved["engine"] is not None and saved["bits"] == quant.bits:
        return dataclasses.replace(quant, engine=saved["engine"])
    return quant


def saved_quant(checkpoint: dict) -> dict | None:
    """The actors' precision a checkpoint holds, ``quant.engine`` named as its actors ran it: a
    run names the engine of a convolutional policy's int8 copy (``plain``), and one that names
    none ran torch.ao's default (``x86``: an MLP's copy, or a convolutional one from before
    plain int8 tensors were the default there). ``None`` for a checkpoint without one."""
    from actorq.quant import QuantSpec, codecs
    from actorq.quant._ao import DEFAULT_ENGINE, ENGINES

    saved = checkpoint.get(EXPERIENCE_STATE, {}).get("quant")
    if saved is None or saved.get("engine") is not None or saved.get("bits") == "auto" or not ENGINES:
        return saved  # (a torch without torch.ao's engines runs every int8 copy on plain tensors)
    return {**saved, "engine": DEFAULT_ENGINE} if codecs.select(QuantSpec(**saved)).int8_kernels else saved


def check_shapes(saved: dict, current: dict, path: Path) -> None:
    """The saved learner's tensors have the names and shapes of this run's learner."""
    missing, unexpected = sorted(set(current) - set(saved)), sorted(set(saved) - set(current))
    if missing or unexpected:
        names = ", ".join((missing or unexpected)[:3])
        raise ConfigError(f"ckpt_path={path}: the checkpoint's networks differ from this run's "
                          f"({'missing' if missing else 'unexpected'}: {names})")
    for name, tensor in current.items():
        if tuple(saved[name].shape) != tuple(tensor.shape):
            raise ConfigError(f"ckpt_path={path}: {name} has shape {tuple(saved[name].shape)} in the "
                              f"checkpoint and {tuple(tensor.shape)} in this run (different algo or env "
                              "settings?)")


def resume_overrides(run_dir: Path, overrides: list[str]) -> list[str]:
    """The overrides that continue the run in ``run_dir`` from its last checkpoint: those it was
    started with (its ``.hydra/overrides.yaml``), then ``overrides``, which replace a started
    one of the same key, then ``run_dir`` and ``ckpt_path=last`` (unless ``overrides`` names a
    checkpoint). A run dir that cannot be resumed is a :class:`ConfigError` naming why.

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> (run / ".hydra").mkdir(); (run / "checkpoints").mkdir(); (run / LAST_CHECKPOINT).touch()
        >>> _ = (run / SAVED_OVERRIDES).write_text("- +experiment=ppo_cartpole\\n- quant.bits=8\\n- run_dir=x\\n")
        >>> print(*resume_overrides(run, ["actors.total_frames=200000", "quant.bits=32"])[:3])
        +experiment=ppo_cartpole actors.total_frames=200000 quant.bits=32
        >>> print(resume_overrides(run, [])[-1])
        ckpt_path=last
    """
    saved = run_dir / SAVED_OVERRIDES
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run dir")
    if not saved.is_file():
        raise ConfigError(f"{run_dir} has no {SAVED_OVERRIDES}, so it was not started by `actorq train`; "
                          f"run `actorq train` with its overrides and run_dir={run_dir} ckpt_path=last")
    given = [_override_key(override) for override in overrides]
    for refused in ("run_dir", "hydra.run.dir", "hydra.sweep.dir"):
        if refused in given:
            raise ConfigError(f"resume continues the run in {run_dir}: {refused} cannot change (to branch a "
                              f"run, `actorq train` it with ckpt_path={run_dir / LAST_CHECKPOINT} and a new run_dir)")
    if "ckpt_path" not in given and not (run_dir / LAST_CHECKPOINT).is_file():
        raise ConfigError(f"{run_dir} has no {LAST_CHECKPOINT} to resume from (a run with callbacks=no_checkpoint "
                          "saves none)")
    started = yaml.safe_load(saved.read_text()) or []
    replaced = {*given, "run_dir", "hydra.run.dir", "ckpt_path"}
    kept = [override for override in started if _override_key(override) not in replaced]
    resume_from = [] if "ckpt_path" in given else ["ckpt_path=last"]
    return [*kept, *overrides, f"run_dir={override_value(str(run_dir))}", *resume_from]


def _override_key(override: str) -> str:
    """``+experiment=NAME`` -> ``experiment``; a flag (``-m``) is refused: a resume is one run."""
    if override.startswith("-"):
        raise ConfigError(f"resume continues one run: {override} is not an override (KEY=VALUE)")
    try:
        return OverridesParser.create().parse_override(override).key_or_group
    except HydraException as error:
        raise ConfigError(f"{override!r} is not an override (KEY=VALUE): {error}") from error
