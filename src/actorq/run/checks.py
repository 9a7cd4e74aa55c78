"""Checks before a run starts: its overrides compose (:func:`composition_error`, run by
``actorq train``), and the composed config passes :func:`check_run_config` (run by
``train()`` before anything is built): types and ranges of the keys every run has,
consistency across keys and groups, no key set where nothing reads it, one spelling for each
setting. A bad value stops the run with one line (exit code 2) before any actor process starts.

Each rule lives in one place: here, or, for a value only one object takes (an algorithm's
learning rates, the replay's fanout, the quantization options), in that object's constructor;
the constructors do not check again what is checked here.

Example:
    >>> from omegaconf import OmegaConf
    >>> cfg = OmegaConf.create({"seed": -1})
    >>> check_seed(cfg)
    Traceback (most recent call last):
    ...
    actorq.util.errors.ConfigError: seed must be an integer in [0, 2**32), got -1
"""

from __future__ import annotations

import difflib
import importlib.resources
import importlib.util
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from omegaconf import DictConfig, ListConfig, OmegaConf

from actorq.actors.processes import check_cores
from actorq.util.errors import ConfigError
from actorq.util.values import AUTO, is_int  # noqa: F401  (read from here too)

TOP_LEVEL_KEYS = {"env", "algo", "actors", "replay", "quant", "callbacks", "logger", "trainer", "seed",
                  "run_dir", "eval", "checkpoint", "ckpt_path", "hydra"}
POSITIVE_INTEGERS = ("actors.num_workers", "actors.envs_per_worker", "actors.frames_per_batch",
                     "actors.total_frames", "replay.capacity", "algo.batch_size", "algo.n_step",
                     "eval.every_frames", "eval.episodes", "eval.max_steps")
NON_NEGATIVE_INTEGERS = ("actors.init_random_frames", "actors.max_restarts", "algo.learning_starts")
BOOLEANS = ("actors.restart_on_failure", "actors.lean_envs", "replay.prioritized", "replay.shared",
            "replay.checkpoint", "eval.deterministic", "algo.double", "algo.batch_critics", "algo.critic_layer_norm", "algo.compile_losses")
ACTOR_BACKENDS = ("process", "ray")
COLLECTIONS = ("auto", "async", "lockstep")  # auto: by the learner's family (actorq.train)
# "auto" (actorq.run.learner_precision) and what lightning.Trainer accepts
TRAINER_PRECISIONS = (AUTO, "32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true",
                      "transformer-engine", "transformer-engine-float16", "32", "16", "bf16", "64", 32, 16, 64)


def check_run_config(cfg: DictConfig) -> None:
    """Every check below, in order; raises :class:`~actorq.util.errors.ConfigError`."""
    check_top_level(cfg)
    check_env_modules(cfg)
    check_seed(cfg)
    check_integers(cfg)
    check_booleans(cfg)
    check_budget(cfg)
    check_actor_sizes(cfg)
    check_actor_backend(cfg)
    check_read_keys(cfg)
    check_added_keys(cfg)
    check_one_spelling(cfg)
    check_trainer(cfg)
    check_stop_at_return(cfg)


def check_top_level(cfg: DictConfig) -> None:
    unknown = sorted(set(cfg.keys()) - TOP_LEVEL_KEYS)
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {', '.join(unknown)}; the run config has "
                          f"{', '.join(sorted(TOP_LEVEL_KEYS - {'hydra'}))}")


def check_env_modules(cfg: DictConfig) -> None:
    """Imports ``env.module`` (the modules registering suites of one's own) in this process, so
    that one that cannot be imported stops the run here, not in its actor processes. With
    none named, torch and the env libraries are not imported here (a bad value elsewhere is
    refused in a second)."""
    modules = _select(cfg, "env.module")
    if modules is None:
        return
    from actorq.envs import import_suites

    import_suites(modules)


def check_seed(cfg: DictConfig) -> None:
    seed = cfg.get("seed")
    if not is_int(seed) or not 0 <= seed < 2**32:
        raise ConfigError(f"seed must be an integer in [0, 2**32), got {seed!r}")


def check_integers(cfg: DictConfig) -> None:
    for key in POSITIVE_INTEGERS + NON_NEGATIVE_INTEGERS:
        value = _select(cfg, key)
        if value is None:
            continue
        if not is_int(value):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        if key in POSITIVE_INTEGERS and value < 1:
            raise ConfigError(f"{key} must be positive, got {value!r}")
        if value < 0:
            raise ConfigError(f"{key} must be >= 0, got {value!r}")


def check_booleans(cfg: DictConfig) -> None:
    for key in BOOLEANS:
        value = _select(cfg, key)
        if value is not None and not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")


def check_budget(cfg: DictConfig) -> None:
    """The frame budget must leave room to learn, and the replay must hold a batch."""
    total, starts = _select(cfg, "actors.total_frames"), _select(cfg, "algo.learning_starts")
    if total is not None and starts is not None and starts >= total:
        raise ConfigError(f"algo.learning_starts={starts} must be below actors.total_frames={total}, "
                          "or the run stores experience and never learns from it")
    capacity, batch = _select(cfg, "replay.capacity"), _select(cfg, "algo.batch_size")
    if capacity is not None and batch is not None and capacity < batch:
        raise ConfigError(f"replay.capacity={capacity} cannot hold one batch of algo.batch_size={batch}")


MAX_ENVS_PER_WORKER = 1024  # one worker steps its envs one after another


def max_workers() -> int:
    """More actor processes than this only share the same cores (and file handles)."""
    return 4 * (os.cpu_count() or 1)


def check_actor_sizes(cfg: DictConfig) -> None:
    """Sizes a machine can start: a typo like ``actors.num_workers=100000`` must be refused
    here, not by the operating system after thousands of processes."""
    workers, envs = _select(cfg, "actors.num_workers"), _select(cfg, "actors.envs_per_worker")
    if workers is not None and workers > max_workers():
        raise ConfigError(f"actors.num_workers={workers} is more than 4 processes per CPU core "
                          f"({max_workers()} here); use actors.envs_per_worker to step more envs per process")
    if envs is not None and envs > MAX_ENVS_PER_WORKER:
        raise ConfigError(f"actors.envs_per_worker={envs} is more than {MAX_ENVS_PER_WORKER}; "
                          "use more actors.num_workers")
    batch, total = _select(cfg, "actors.frames_per_batch"), _select(cfg, "actors.total_frames")
    if batch is not None and total is not None and batch > total:
        raise ConfigError(f"actors.frames_per_batch={batch} is more than actors.total_frames={total}")


def check_actor_backend(cfg: DictConfig) -> None:
    """A known backend and collection mode, Ray installed before it is needed."""
    backend = _select(cfg, "actors.backend")
    if backend is None:
        return
    if backend not in ACTOR_BACKENDS:
        raise ConfigError(f"actors.backend must be {' or '.join(ACTOR_BACKENDS)}, got {backend!r}")
    collection = _select(cfg, "actors.collection")
    if collection is not None and collection not in COLLECTIONS:
        raise ConfigError(f"actors.collection must be {', '.join(COLLECTIONS)}, got {collection!r}")
    if backend != "ray":  # a Ray actor's cores are its own machine's
        check_cores(_select(cfg, "actors.cores"))
        return
    if importlib.util.find_spec("ray") is None:
        from actorq.actors.ray_pool import INSTALL_HINT

        raise ConfigError(INSTALL_HINT)
    num_cpus = _select(cfg, "actors.ray.num_cpus")
    if num_cpus is not None and (isinstance(num_cpus, bool) or not isinstance(num_cpus, (int, float))
                                 or not 0 <= num_cpus < float("inf")):
        raise ConfigError(f"actors.ray.num_cpus must be a number >= 0, got {num_cpus!r}")
    in_flight = _select(cfg, "actors.ray.requests_in_flight")
    if in_flight is not None and (isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1):
        raise ConfigError(f"actors.ray.requests_in_flight must be an integer >= 1, got {in_flight!r}")
    address = _select(cfg, "actors.ray.address")
    if not isinstance(address, str) or not address:
        raise ConfigError(f"actors.ray.address must be local, auto or a cluster's address, got {address!r}")


@dataclass(frozen=True)
class ReadOnlyWith:
    """Keys (or whole nodes) of a group's option that its code reads only with ``setting``."""

    keys: tuple[str, ...]
    setting: str  # as written on the command line
    holds: Callable[[DictConfig], bool]


READ_ONLY_WITH = (
    ReadOnlyWith(("replay.alpha", "replay.beta", "replay.beta_annealing_steps", "replay.eps"),
                 "replay.prioritized=true", lambda cfg: _select(cfg, "replay.prioritized") is True),
    ReadOnlyWith(("replay.fanout",), "replay.prioritized=true or replay.shared=true",  # shared: a sum tree too
                 lambda cfg: _select(cfg, "replay.prioritized") is True or _select(cfg, "replay.shared") is True),
    ReadOnlyWith(("actors.ray",), "actors.backend=ray",
                 lambda cfg: _select(cfg, "actors.backend") == "ray"),
    ReadOnlyWith(("quant.auto_tolerance",), "quant.bits=auto", lambda cfg: _select(cfg, "quant.bits") == AUTO),
    ReadOnlyWith(("quant.engine",), "quant.bits=8 or quant.bits=auto",
                 lambda cfg: _select(cfg, "quant.bits") in (8, AUTO) or _select(cfg, "quant.format") is not None),
    # The budget bounds a KL: the built-in learners without one are named (one's own may have one).
    ReadOnlyWith(("quant.max_kl", "quant.fallback_bits"), "a stochastic policy (algo=ppo or algo=sac)",
                 lambda cfg: _select(cfg, "algo._target_") not in WITHOUT_KL),
)
WITHOUT_KL = tuple(f"actorq.algos.{module}.{name}" for module, name in
                   (("dqn", "DQN"), ("ddpg", "DDPG"), ("td3", "TD3"), ("d4pg", "D4PG")))


def check_read_keys(cfg: DictConfig) -> None:
    """A key set away from its option's default where nothing reads it is refused: the run
    would go on as if it had not been set. A sweep's jobs are checked together, before the
    first starts (:func:`actorq.run.launch.sweep_error`), so a job of a sweep is not refused here."""
    if not _in_sweep():
        unread = unread_keys(cfg)
        if unread:
            raise ConfigError(next(iter(unread.values())))


def unread_keys(cfg: DictConfig) -> dict[str, str]:
    """``{key: why, in one line}`` for each key of ``cfg`` set away from its default where
    nothing reads it."""
    return {key: f"{key}={_spelled(value)} needs {rule.setting}: nothing reads it otherwise"
            for rule in READ_ONLY_WITH if not rule.holds(cfg)
            for prefix in rule.keys for key, value in _changed(cfg, prefix)}


def _changed(cfg: DictConfig, prefix: str) -> list[tuple[str, object]]:
    """``(key, value)`` of each leaf under ``prefix`` whose value is not its option's default."""
    group, _, rest = prefix.partition(".")
    value, default = _select(cfg, prefix), _select(option_defaults(group), rest)
    if isinstance(value, DictConfig):
        return [pair for child in value for pair in _changed(cfg, f"{prefix}.{child}")]
    if _plain(value) != _plain(default):
        return [(prefix, value)]
    return []


CLOSED_GROUPS = ("actors", "replay", "quant")
"""Groups with one option whose file lists every key the code reads: a key added to one with
``+`` (``+replay.capasity=10``) is a typo that nothing would read."""


def check_added_keys(cfg: DictConfig) -> None:
    """A key of a :data:`CLOSED_GROUPS` group that its option's file does not have is refused,
    naming the closest key it has."""
    for group in CLOSED_GROUPS:
        node = _select(cfg, group)
        if not isinstance(node, DictConfig):
            continue
        known = list(option_defaults(group).keys())
        for key in node.keys():
            if key not in known:
                close = closest_key(f"{group}.{key}", [f"{group}.{name}" for name in known])
                hint = f"; did you mean {close}?" if close else ""
                raise ConfigError(f"{group}.{key}: no such key, and nothing would read it{hint}")


@cache
def option_defaults(group: str) -> DictConfig:
    """The keys of ``conf/GROUP/default.yaml`` as written there, the group's one option."""
    return OmegaConf.load(importlib.resources.files("actorq.conf") / group / "default.yaml")


def check_one_spelling(cfg: DictConfig) -> None:
    """A callback key that the callbacks config takes from a top-level key
    (``callbacks.evaluation.every_frames: ${eval.every_frames}``) is set through that key
    only: one spelling for each setting."""
    for name, aliases in callback_aliases().items():
        node = _select(cfg, f"callbacks.{name}")
        written = OmegaConf.to_container(node, resolve=False) if isinstance(node, DictConfig) else {}
        for key, top_level in aliases.items():
            if key in written and written[key] != f"${{{top_level}}}":
                raise ConfigError(f"callbacks.{name}.{key} is set with {top_level}; "
                                  f"say {top_level}={_spelled(node[key])}")


@cache
def callback_aliases() -> dict[str, dict[str, str]]:
    """``{callback: {key: top-level key}}`` for every key of ``conf/callbacks/default.yaml``
    that is only an interpolation of a top-level key."""
    config = OmegaConf.load(importlib.resources.files("actorq.conf") / "callbacks" / "default.yaml")
    aliases: dict[str, dict[str, str]] = {}
    for name, node in OmegaConf.to_container(config, resolve=False).items():
        for key, value in (node or {}).items():
            match = re.fullmatch(r"\$\{([\w.]+)\}", str(value))
            if match and match.group(1).split(".")[0] in TOP_LEVEL_KEYS:
                aliases.setdefault(name, {})[key] = match.group(1)
    return aliases


def _in_sweep() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _plain(value: object) -> object:
    return OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value


def _spelled(value: object) -> str:
    """``value`` as it is written on the command line."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return str(_plain(value))


def check_trainer(cfg: DictConfig) -> None:
    epochs = _select(cfg, "trainer.max_epochs")
    if epochs is not None and epochs != 1:
        raise ConfigError(f"trainer.max_epochs must be 1 (one epoch is the actors' whole frame budget: "
                          f"set actors.total_frames instead), got {epochs!r}")
    precision = _select(cfg, "trainer.precision")
    if precision is not None and (isinstance(precision, bool) or precision not in TRAINER_PRECISIONS):
        raise ConfigError(f"trainer.precision must be auto (the faster of 32-true and bf16-mixed, measured) or "
                          f"a Lightning precision such as 32-true or bf16-mixed, got {precision!r}")
    devices = _select(cfg, "trainer.devices")
    if devices is not None and (not is_int(devices) or devices < 1):
        raise ConfigError(f"trainer.devices must be a positive integer (learner ranks), got {devices!r}")
    nodes = _select(cfg, "trainer.num_nodes")
    if nodes is not None and nodes != 1:
        raise ConfigError(f"trainer.num_nodes must be 1: parallel learners run on one machine "
                          f"(actors scale out with actors.backend=ray), got {nodes!r}")
    if devices is not None and devices > 1:
        check_parallel_learners(cfg, devices)


def check_stop_at_return(cfg: DictConfig) -> None:
    """``eval.stop_at_return``: a finite number, read by the evaluation of a single learner
    (the other learner ranks of ``trainer.devices > 1`` follow rank 0's batches to the end of
    the budget)."""
    bar = _select(cfg, "eval.stop_at_return")
    if bar is None:
        return
    if isinstance(bar, bool) or not isinstance(bar, (int, float)) or not math.isfinite(bar):
        raise ConfigError(f"eval.stop_at_return must be a number (the eval return that stops the run) or null, "
                          f"got {bar!r}")
    if _select(cfg, "callbacks.evaluation") is None:
        raise ConfigError(f"eval.stop_at_return={bar} needs callbacks.evaluation: nothing reads it otherwise")
    devices = _select(cfg, "trainer.devices")
    if is_int(devices) and devices > 1:
        raise ConfigError(f"eval.stop_at_return stops a single learner; with trainer.devices={devices} the run "
                          "plays its whole budget (set eval.stop_at_return=null)")


def check_parallel_learners(cfg: DictConfig, devices: int) -> None:
    """``trainer.devices > 1``: the batch splits evenly over the ranks, and the run was started
    by ``actorq train`` (Lightning starts the other ranks by running that command again)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    batch = _select(cfg, "algo.batch_size")
    if batch is not None and batch % devices:
        raise ConfigError(f"algo.batch_size={batch} must split evenly over trainer.devices={devices} "
                          "learner ranks (each trains on its share of every batch)")
    if not HydraConfig.initialized():
        raise ConfigError("trainer.devices > 1 needs the command line (actorq train ...): Lightning "
                          "starts the other learner ranks by running that command again")
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        raise ConfigError("trainer.devices > 1 cannot run in a sweep (-m): Lightning would start each "
                          "learner rank as a sweep of its own; run the sweep's jobs one by one")


def _select(cfg: DictConfig, key: str):
    node = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            return None
        node = node[part]
    return node


REPLACED_SPELLINGS = {
    "replay=prioritized": "the replay group has one option; say replay.prioritized=true",
    "replay=uniform": "the replay group has one option, uniform unless replay.prioritized=true",
}
"""Overrides that composed once, each with the one way to say it now."""

RENAMED_KEYS = {"callbacks.broadcast": "callbacks.push"}
"""Keys (and the keys under them) that were renamed: the old name with the new one."""


def composition_error(argv: list[str]) -> str | None:
    """Why Hydra cannot compose the config of a single run from ``argv``, in one line (``None``
    when it can). Sweeps (``-m``), Hydra's own flags and ``hydra.*`` overrides are left to
    Hydra, which checks each job itself; ``hydra.searchpath`` is kept, since a user's own
    config folder (an experiment of one's own) is part of the composition."""
    if any(arg.startswith("-") for arg in argv):
        return None
    try:
        composed(config_overrides(argv))
    except ConfigError as error:
        return str(error)
    return None


def config_overrides(argv: list[str]) -> list[str]:
    """The overrides of ``argv`` that make up the run's config: all but Hydra's own flags and
    ``hydra.*`` keys, where ``hydra.searchpath`` stays (a user's config folder).

    >>> config_overrides(["-m", "seed=0,1", "hydra.sweep.dir=s", "hydra.searchpath=[file://conf]"])
    ['seed=0,1', 'hydra.searchpath=[file://conf]']
    """
    return [arg for arg in argv if not arg.startswith("-") and (
        not arg.lstrip("+~").startswith("hydra") or arg.lstrip("+~").startswith("hydra.searchpath"))]


def composed(overrides: list[str], return_hydra_config: bool = False) -> DictConfig:
    """The config Hydra composes from one run's ``overrides`` (with its ``hydra`` node if
    asked); a :class:`~actorq.util.errors.ConfigError` in one line when it cannot, naming a
    replaced spelling or a renamed key where one was used."""
    replaced = next((arg for arg in overrides if arg.lstrip("+") in REPLACED_SPELLINGS), None)
    if replaced is not None:
        raise ConfigError(f"{replaced}: {REPLACED_SPELLINGS[replaced.lstrip('+')]}")
    for arg in overrides:
        key = arg.lstrip("+~").split("=", 1)[0]
        old = next((old for old in RENAMED_KEYS if key == old or key.startswith(old + ".")), None)
        if old is not None:
            raise ConfigError(f"{arg}: {old} is now {RENAMED_KEYS[old]} "
                              f"(say {arg.replace(old, RENAMED_KEYS[old], 1)})")
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from actorq.run.env_ids import env_overrides

    overrides = env_overrides(overrides)
    try:
        with initialize_config_module("actorq.conf", version_base="1.3"):
            return compose("config", overrides=overrides, return_hydra_config=return_hydra_config)
    except (HydraException, OmegaConfBaseException, ValueError) as error:  # Hydra raises all three
        unknown = re.match(r"Could not override '([^']+)'", str(error))
        if unknown and "is not in struct" in str(error.__cause__):
            raise ConfigError(_no_such_key(unknown.group(1), overrides)) from error
        raise ConfigError(_one_line(str(error))) from error


def _no_such_key(key: str, overrides: list[str]) -> str:
    """The line for an override of a key the config does not have, naming the closest key it
    has (Hydra's own hint, to add the key with ``+``, would make a typo pass every check)."""
    others = [arg for arg in overrides if arg.lstrip("~").split("=", 1)[0] != key]
    try:
        keys = dotted_keys(OmegaConf.to_container(composed(others), resolve=False))
    except ConfigError:
        keys = []
    close = closest_key(key, keys)
    hint = f"; did you mean {close}?" if close else " (--cfg job prints the config's keys)"
    return f"Could not override '{key}': no such key{hint}"


def dotted_keys(node: object, prefix: str = "") -> list[str]:
    """Every key of a nested dict, dotted, nodes and leaves.

    >>> dotted_keys({"seed": 0, "replay": {"capacity": 10, "alpha": 0.6}})
    ['seed', 'replay', 'replay.capacity', 'replay.alpha']
    """
    if not isinstance(node, dict):
        return []
    return [key for name, child in node.items()
            for key in (f"{prefix}{name}", *dotted_keys(child, f"{prefix}{name}."))]


def closest_key(key: str, keys: list[str]) -> str | None:
    """The key of ``keys`` closest to ``key``: by the whole key, else the shortest key it
    begins, else by its last part (a key of the same group first); ``None`` when none is close.

    >>> keys = ["seed", "replay.capacity", "eval.every_frames", "checkpoint.every_frames"]
    >>> closest_key("replay.capasity", keys), closest_key("capasity", keys), closest_key("checkpoint.every", keys)
    ('replay.capacity', 'replay.capacity', 'checkpoint.every_frames')
    >>> closest_key("eval.every", keys), closest_key("algo.nope", keys) is None
    ('eval.every_frames', True)
    """
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.8) or sorted(
        (known for known in keys if known.startswith(key)), key=len)
    if close:
        return close[0]
    group, leaf = key.split(".", 1)[0], key.rsplit(".", 1)[-1]
    by_leaf: dict[str, str] = {}
    for known in sorted(keys, key=lambda known: known.split(".", 1)[0] != group):
        by_leaf.setdefault(known.rsplit(".", 1)[-1], known)
    close = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.75)
    return by_leaf[close[0]] if close else None


def _one_line(message: str) -> str:
    """Hydra's multi-line message as one line: the first line, its hint, the options offered.

    >>> _one_line("In 'config': Could not find 'algo/x'\\n\\nAvailable options in 'algo':\\n\\tdqn\\n\\ttd3\\n"
    ...          "Config search path:\\n\\tprovider=main")
    "In 'config': Could not find 'algo/x'; available options in 'algo': dqn, td3"
    >>> _one_line("Could not override 'foo'.\\nTo append to your config use +foo=1")
    "Could not override 'foo'. To append to your config use +foo=1"
    """
    head, _, rest = message.partition("\n")
    if "Available options in" in rest:
        listing = rest.split("Available options in", 1)[1].split("Config search path", 1)[0]
        group, _, options = listing.partition(":")
        return f"{head}; available options in {group.strip()}: {', '.join(options.split())}"
    hint = rest.strip().splitlines()[0] if rest.strip() else ""
    return f"{head} {hint}".strip()
