"""A policy as one TorchScript file that plain ``torch`` loads and runs without actorq.

Two ways in: :func:`export` writes a :class:`~actorq.quant.QuantizedNetwork` (trunk at its
precision + fp32 head); ``actorq export RUN_DIR OUT`` (:func:`export_checkpoint`) writes the
actors' policy of a run's last checkpoint (or of the ``.ckpt`` named instead): the payload
they last received, or for an fp32 run an int8 dynamic quantization unless ``--bits`` says
otherwise. A re-quantization
calibrates on the observations the run saved with the checkpoint (states its policy visited;
:func:`calibration_set`). Either way ``torch.jit.load(OUT)(observation) -> action``.

Example:
    >>> import tempfile, pathlib
    >>> from actorq.envs import EnvSpec
    >>> from actorq.algos.networks import DeterministicActor
    >>> from actorq.quant import QuantSpec
    >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> actor = DeterministicActor(spec, hidden=(32, 32))
    >>> quantized = QuantizedNetwork.from_network(actor, QuantSpec(bits=8, mode="dynamic"))
    >>> path = export(quantized, pathlib.Path(tempfile.mkdtemp()) / "policy.pt")
    >>> torch.jit.load(str(path))(torch.zeros(3)).shape  # in any process, with torch only
    torch.Size([1])

The command line (``tests/integration/test_export.py`` runs it on a real checkpoint)::

    actorq export outputs/RUN policy.pt [--bits 8]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import warnings
from pathlib import Path

import torch
from torch import nn

from actorq.tools.agent import learner_from_config, payload_format, saved_actors_network
from actorq.experience import CALIBRATION_OBSERVATIONS
from actorq.envs import make_env, random_observations
from actorq.util.errors import ConfigError
from actorq.quant import QuantizedNetwork, QuantSpec
from actorq.run.resume import EXPERIENCE_STATE, LAST_CHECKPOINT, read_checkpoint

__all__ = ["StandalonePolicy", "actors_network", "calibration_set", "export", "export_checkpoint", "load_learner",
           "payload_format"]

METADATA_FILE = "actorq.json"
log = logging.getLogger(__name__)


class StandalonePolicy(nn.Module):
    """``obs -> action``: the policy's observation normalizer (if it has one), the quantized
    trunk, the fp32 head and, for Q-networks and categorical policies, the argmax.

    Accepts ``[obs_dim]`` or ``[..., obs_dim]`` observations, like the actors' network.
    """

    def __init__(self, trunk: nn.Module, head: nn.Module, greedy: bool, normalizer: nn.Module | None = None):
        super().__init__()
        self.normalizer = normalizer if normalizer is not None else nn.Identity()
        self.trunk = trunk
        self.head = head
        self.greedy = greedy

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        flat = self.normalizer(observation.reshape(-1, observation.shape[-1]))
        out = self.head(self.trunk(flat))
        out = out.reshape(observation.shape[:-1] + out.shape[-1:])
        if self.greedy:
            return out.argmax(dim=-1)
        return out


def export(network: QuantizedNetwork, path: str | Path, greedy: bool = False) -> Path:
    """Writes ``network`` (trunk at its precision + head) as a TorchScript archive.

    Load it with ``torch.jit.load(path)``; the file also holds ``actorq.json`` (precision,
    codec format, widths, per-layer norms and activations), readable with
    ``torch.jit.load(path, _extra_files={"actorq.json": ""})``.

    Args:
        network: a quantized policy with a payload loaded.
        path: the file to write (parent directories are created).
        greedy: return ``argmax`` over the outputs (a Q-network's action) instead of them.

    Returns:
        The path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    policy = StandalonePolicy(network.executable_trunk(), network.head, greedy, network.normalizer).eval()
    metadata = {
        "precision": network.quant.describe(),
        "format": network.codec.name,
        "sizes": list(network.layout.sizes),
        "layer_norm": network.layout.layer_norm,
        "layers": [dataclasses.asdict(layer) for layer in network.layout.layers],
        "normalizes_observations": network.normalizer is not None,
        "greedy": greedy,
        "torch": torch.__version__,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchScript is in maintenance mode upstream
        scripted = torch.jit.script(policy)
        torch.jit.save(scripted, str(path), _extra_files={METADATA_FILE: json.dumps(metadata)})
    return path


def load_learner(checkpoint: dict):
    """Rebuilds the run's learner from a checkpoint written by ``actorq.train``."""
    config = (checkpoint.get("datamodule_hyper_parameters") or {}).get("config")
    if config is None:
        raise ConfigError("this checkpoint was not written by actorq (no run config inside)")
    learner = learner_from_config(config, checkpoint["state_dict"], "the checkpoint")
    env = make_env(config["env"]["name"], seed=config["seed"], library=config["env"].get("library"))
    return learner, env


def actors_network(checkpoint: dict, learner, env, bits: int | None) -> QuantizedNetwork:
    """The network the actors last ran, or a fresh quantization at ``bits`` (int8 dynamic
    for a run whose actors were fp32) calibrated on :func:`calibration_set`."""
    state = checkpoint.get(EXPERIENCE_STATE, {})
    quant = QuantSpec(**state["quant"]) if "quant" in state else QuantSpec(bits=32)
    network = learner.behaviour_network
    if bits is None and not quant.is_full_precision and "payload" in state:
        return saved_actors_network(checkpoint, network, "the checkpoint")
    if bits is not None:
        quant = quant.with_bits(bits)
    elif quant.is_full_precision:
        quant = QuantSpec(bits=8, mode="dynamic")
    return QuantizedNetwork.from_network(network, quant, calibration_set(checkpoint, env, quant))


def calibration_set(checkpoint: dict, env, quant: QuantSpec) -> torch.Tensor:
    """The observations a re-quantization of the checkpoint's policy at ``quant`` calibrates on.

    The run's own, saved with the checkpoint (states its policy visited); for a checkpoint
    written before runs saved them, ``quant.calibration_samples`` observations from random
    actions in ``env``, with a logged note where the precision calibrates on them.
    """
    saved = checkpoint.get(EXPERIENCE_STATE, {}).get(CALIBRATION_OBSERVATIONS)
    if saved is not None:
        return saved
    if quant.needs_calibration:
        log.warning("the checkpoint holds no observations from its run (written by an older actorq): "
                    "%s calibrates on %d observations from random actions, not on the states the "
                    "trained policy visits", quant.describe(), quant.calibration_samples)
    return random_observations(env, quant.calibration_samples)


def export_checkpoint(checkpoint_path: str | Path, out: str | Path, bits: int | None = None) -> Path:
    """Writes the standalone policy of a checkpoint (or of a run dir's last one); returns the
    path written."""
    path = Path(checkpoint_path)
    if path.is_dir():
        path = path / LAST_CHECKPOINT
    if not path.is_file():
        raise ConfigError(f"no checkpoint at {path}")
    checkpoint = read_checkpoint(path)
    learner, env = load_learner(checkpoint)
    try:
        network = actors_network(checkpoint, learner, env, bits)
    except ValueError as error:  # a precision QuantSpec refuses, e.g. --bits 1
        raise ConfigError(f"--bits {bits}: {error}") from error
    try:
        return export(network, out, greedy=learner.spec.discrete)
    except OSError as error:
        raise ConfigError(f"cannot write {out}: {error.strerror or error}") from error


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="actorq export", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a run dir (its checkpoints/last.ckpt) or a .ckpt file")
    parser.add_argument("out", help="the file to write (TorchScript)")
    parser.add_argument("--bits", type=int, default=None, help="re-quantize at this precision (8, 16, 2..7, 32)")
    args = parser.parse_args(argv)
    try:
        path = export_checkpoint(args.checkpoint, args.out, args.bits)
    except ConfigError as error:
        print(f"actorq.export: error: {error}", file=sys.stderr)
        sys.exit(2)
    print(f"Wrote {path}: load it with torch.jit.load({str(path)!r})")


if __name__ == "__main__":
    main()
