"""``python -m actorq.export CHECKPOINT OUT``: the actors' quantized policy as one file.

The file is a TorchScript archive that plain ``torch`` loads and runs, with no actorq
installed: ``torch.jit.load(OUT)(observation) -> action``. The precision is the run's
(``quant.*`` in the checkpoint); an fp32 run exports int8 dynamic unless ``--bits`` says
otherwise.

Usage (``tests/integration/test_export.py`` runs it on a real checkpoint)::

    python -m actorq.export outputs/RUN/checkpoints/last.ckpt policy.pt [--bits 8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf

from actorq.envs import EnvSpec, make_env, random_observations
from actorq.errors import ConfigError
from actorq.quant import QuantizedNetwork, QuantSpec, export
from actorq.train import build_learner

EXPERIENCE_STATE = "Experience"  # Lightning saves a datamodule's state under its class name


def load_learner(checkpoint: dict):
    """Rebuilds the run's learner from a checkpoint written by ``actorq.train``."""
    config = (checkpoint.get("datamodule_hyper_parameters") or {}).get("config")
    if config is None:
        raise ConfigError("this checkpoint was not written by actorq (no run config inside)")
    cfg = OmegaConf.create(config)
    env = make_env(cfg.env.name, seed=cfg.seed, library=cfg.env.get("library"))
    learner = build_learner(cfg.algo, EnvSpec.from_env(env), cfg.env.name)
    learner.load_state_dict(checkpoint["state_dict"])
    return learner, env


def actors_network(checkpoint: dict, learner, env, bits: int | None) -> QuantizedNetwork:
    """The network the actors last ran, or a fresh quantization at ``bits`` (int8 dynamic
    for a run whose actors were fp32)."""
    state = checkpoint.get(EXPERIENCE_STATE, {})
    quant = QuantSpec(**state["quant"]) if "quant" in state else QuantSpec(bits=32)
    network = learner.behaviour_network
    if bits is None and quant.bits != 32 and "payload" in state:
        quantized = QuantizedNetwork.template_for(network, quant)
        quantized.load_payload(state["payload"])
        return quantized
    if bits is not None:
        quant = quant.with_bits(bits, mode=quant.mode if bits == 8 else "dynamic")
    elif quant.bits == 32:
        quant = QuantSpec(bits=8, mode="dynamic")
    calibration = random_observations(env, quant.calibration_samples)
    return QuantizedNetwork.from_network(network, quant, calibration)


def export_checkpoint(checkpoint_path: str | Path, out: str | Path, bits: int | None = None) -> Path:
    """Writes the standalone policy of a checkpoint; returns the path written."""
    path = Path(checkpoint_path)
    if not path.is_file():
        raise ConfigError(f"no checkpoint at {path}")
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    learner, env = load_learner(checkpoint)
    network = actors_network(checkpoint, learner, env, bits)
    return export(network, out, greedy=learner.spec.discrete)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m actorq.export", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a .ckpt from a run's checkpoints/ folder")
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
