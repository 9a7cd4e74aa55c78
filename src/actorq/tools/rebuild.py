"""A finished run's networks rebuilt from what it saved: its ``config.yaml`` and a checkpoint
read with ``torch.load(weights_only=True)`` (tensors and plain containers only, never code).

The learner is built the way ``actorq train`` builds it (:func:`actorq.run.build.build_learner`)
and holds the checkpoint's weights; the actors' copy is the version they last received, or a
fresh quantization calibrated on the observations the run saved (:func:`actors_network`).
Anything wrong with the run dir or the checkpoint is one :class:`~actorq.util.errors.ConfigError`
line.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from torch import nn

from actorq.envs import EnvSpec, import_suites, make_env, random_observations
from actorq.experience import CALIBRATION_OBSERVATIONS
from actorq.quant import QuantizedNetwork, QuantSpec
from actorq.quant.module_layout import ModuleLayout, layout_of
from actorq.quant.codecs import registered
from actorq.run.resume import EXPERIENCE_STATE, LAST, check_shapes, saved_quant
from actorq.util.errors import ConfigError

CONFIG_FILE = "config.yaml"
log = logging.getLogger(__name__)


def read_config(run_dir: Path) -> DictConfig:
    """The run's ``config.yaml``."""
    if not run_dir.is_dir():
        raise ConfigError(f"no run dir at {run_dir}")
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise ConfigError(f"{run_dir} has no {CONFIG_FILE}: not a run dir written by actorq train")
    try:
        config = OmegaConf.load(path)
    except Exception as error:  # noqa: BLE001 - YAML or OmegaConf: the file is damaged
        raise ConfigError(f"{path}: not a readable config: {_short(error)}") from error
    if not isinstance(config, DictConfig) or not {"env", "algo"} <= set(config.keys()):
        raise ConfigError(f"{path}: not a run config (no env and algo inside)")
    return config


def find_checkpoint_file(run_dir: Path, ckpt: str | Path) -> Path:
    """``checkpoints/last.ckpt`` for ``"last"``; else the path, or the run's checkpoint of that name."""
    folder = run_dir / "checkpoints"
    path = folder / "last.ckpt" if str(ckpt) == LAST else Path(ckpt).expanduser()
    if not path.is_file() and not path.is_absolute() and (folder / path).is_file():
        path = folder / path
    if not path.is_file():
        saved = sorted(p.name for p in folder.glob("*.ckpt")) if folder.is_dir() else []
        listing = f"; {folder} has {', '.join(saved)}" if saved else f"; {run_dir} has no checkpoints"
        raise ConfigError(f"ckpt={ckpt}: no checkpoint at {path}{listing}")
    return path


def learner_from_config(config: DictConfig | dict, state_dict: dict, source: Path | str):
    """The run's learner, built as ``actorq.train`` builds it, holding ``state_dict``'s weights."""
    from actorq.run.build import build_learner  # the trainer's stack, only when a learner is rebuilt

    cfg = config if isinstance(config, DictConfig) else OmegaConf.create(config)
    try:
        import_suites(cfg.env.get("module"))
        env = make_env(cfg.env.name, seed=cfg.seed, library=cfg.env.get("library"), options=cfg.env.get("options"))
        learner = build_learner(cfg.algo, EnvSpec.from_env(env), cfg.env.name)
    except (OmegaConfBaseException, HydraException) as error:
        raise ConfigError(f"{source}: the run's config does not build a learner: {_short(error)}") from error
    check_shapes(state_dict, learner.state_dict(), Path(source))
    learner.load_state_dict(state_dict)
    return learner.eval()


def saved_actors_network(checkpoint: dict, network: nn.Module, source: Path | str) -> QuantizedNetwork:
    """The actors' copy of ``network``: the whole version they last received (checkpoint state:
    payload, head state and observation statistics; checkpoints that saved the payload alone
    keep ``network``'s head and statistics)."""
    state = checkpoint.get(EXPERIENCE_STATE, {})
    if "quant" not in state or "payload" not in state:
        raise ConfigError(f"{source}: the checkpoint holds no actors' policy (no quant and payload inside)")
    try:
        quant = QuantSpec(**saved_quant(checkpoint))  # the engine named as the actors ran it
        if state.get("rung", 0):  # the last push went out at a fallback precision of quant.max_kl
            quant = quant.fallbacks()[state["rung"] - 1]
        quantized = QuantizedNetwork.template_for(network, payload_format(quant, network, state["payload"]))
        quantized.load_version(state["payload"], state.get("head"), state.get("normalizer"))
    except (TypeError, ValueError, KeyError, IndexError, RuntimeError) as error:
        raise ConfigError(f"{source}: the actors' policy in the checkpoint does not load: {_short(error)}") from error
    return quantized.eval()


def payload_format(quant: QuantSpec, network: nn.Module, payload: dict) -> QuantSpec:
    """``quant``, or the same precision in the codec that wrote ``payload``.

    A checkpoint stores its spec as configured (``format: null``), so one written before
    ``quant.bits=8 mode=static`` kept the output layer in fp32 holds an all-int8 payload
    (``int8_static``); this finds the codec serving those bits and mode whose payload it is.
    """
    layout = layout_of(network.trunk)
    candidates = [quant] + [dataclasses.replace(quant, format=codec.name) for codec in registered()
                            if quant.format is None and codec.serves(quant)
                            and (codec.runs_modules or not isinstance(layout, ModuleLayout))]
    for candidate in candidates:
        if set(candidate.codec.payload_spec(layout, candidate)) == set(payload):
            return candidate
    return quant  # load_payload says what does not fit


def _short(error: Any) -> str:
    """An exception as one short line."""
    return f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"


def load_learner(checkpoint: dict):
    """Rebuilds the run's learner from a checkpoint written by ``actorq.train``."""
    config = (checkpoint.get("datamodule_hyper_parameters") or {}).get("config")
    if config is None:
        raise ConfigError("this checkpoint was not written by actorq (no run config inside)")
    learner = learner_from_config(config, checkpoint["state_dict"], "the checkpoint")
    env = make_env(config["env"]["name"], seed=config["seed"], library=config["env"].get("library"),
                   options=config["env"].get("options"))
    return learner, env


def actors_network(checkpoint: dict, learner, env, bits: int | None) -> QuantizedNetwork:
    """The network the actors last ran (fp32 for a run whose actors were fp32), or a fresh
    quantization at ``bits`` (static for a convolutional policy, which has int8 kernels with
    calibrated ranges only) calibrated on :func:`calibration_set`."""
    state = checkpoint.get(EXPERIENCE_STATE, {})
    quant = QuantSpec(**state["quant"]) if "quant" in state else QuantSpec(bits=32)  # a fresh one: today's engine
    network = learner.behaviour_network
    if bits is None and not quant.is_full_precision and "payload" in state:
        return saved_actors_network(checkpoint, network, "the checkpoint")
    if bits is not None:
        quant = quant.with_bits(bits)
        if bits == 8 and isinstance(layout_of(network.trunk), ModuleLayout):
            quant = dataclasses.replace(quant, mode="static")
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
