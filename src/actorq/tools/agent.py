"""A trained run as a policy: ``actorq.load(run_dir)`` -> an :class:`Agent` with a greedy ``act``.

The learner is rebuilt from the run dir's ``config.yaml`` the way ``actorq.train`` builds it
(:func:`actorq.run.build.build_learner`), and its weights come from a checkpoint read with
``torch.load(weights_only=True)``: tensors and plain containers only, never code. The agent
plays either the learner's fp32 policy or the actors' reduced-precision copy: the payload
they last received, as the checkpoint holds it. Anything wrong with the run dir or the
checkpoint is one :class:`~actorq.util.errors.ConfigError` line.

Example:
    >>> load("/nonexistent/run")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    actorq.util.errors.ConfigError: no run dir at /nonexistent/run

With a run trained by ``actorq train ... run_dir=RUN_DIR``::

    agent = actorq.load("RUN_DIR")                        # checkpoints/last.ckpt
    agent = actorq.load("RUN_DIR", policy="quantized")    # the actors' int8 copy
    env = gymnasium.make(agent.config.env.name)
    obs, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step(agent.act(obs))
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from torch import nn

from actorq.callbacks.evaluation import greedy
from actorq.envs import EnvSpec, import_suites, make_env
from actorq.envs import make_batched_env
from actorq.util.errors import ConfigError
from actorq.quant import QuantizedNetwork, QuantSpec, TrunkLayout
from actorq.quant.codecs import registered
from actorq.run.resume import EXPERIENCE_STATE, LAST, check_shapes, read_checkpoint

CONFIG_FILE = "config.yaml"
LEARNER, QUANTIZED = "learner", "quantized"
POLICIES = (LEARNER, QUANTIZED)


class Agent:
    """The greedy policy of a trained run (no exploration; argmax for Q-networks).

    Attributes:
        config: the run's config (``config.yaml``), e.g. ``agent.config.env.name``.
        spec: the environment's :class:`~actorq.envs.EnvSpec` (shapes, action space).
        learner: the rebuilt learner with the checkpoint's weights.
        network: the network that acts: the learner's fp32 policy or the actors' copy.
        policy: ``"learner"`` or ``"quantized"``.
        precision: what ``network`` runs at, e.g. ``"fp32"`` or ``"int8 static per_tensor"``.
        checkpoint: the checkpoint file the weights came from.
    """

    def __init__(self, config: DictConfig, learner, network: nn.Module, policy: str, precision: str,
                 checkpoint: Path):
        self.config = config
        self.learner = learner
        self.spec: EnvSpec = learner.spec
        self.network = network
        self.policy = policy
        self.precision = precision
        self.checkpoint = checkpoint

    def act(self, observation: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """The greedy action for one observation ``[obs_dim]`` or a batch ``[B, obs_dim]``.

        A numpy observation gives a numpy action, a tensor a tensor; discrete actions are
        integer indices.
        """
        return self._run(greedy(self.network, self.spec.discrete), observation)

    def predict(self, observation: np.ndarray | torch.Tensor, deterministic: bool = True
                ) -> tuple[np.ndarray | torch.Tensor, None]:
        """Stable-Baselines3's call: ``(action, None)`` for one observation or a batch.

        ``deterministic=True`` is :meth:`act`. With ``False`` a stochastic policy (PPO, SAC)
        samples its action; a Q-network or a deterministic actor has no distribution and gives
        its greedy action either way (as SB3's TD3 does; SB3's DQN would act epsilon-greedy).
        The ``None`` stands for a recurrent state, which no actorq policy has.
        """
        if deterministic or not hasattr(self.network, "sample"):
            return self.act(observation), None
        return self._run(self.network.sample, observation), None

    def _run(self, policy, observation: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """``policy`` on ``observation`` (one or a batch), numpy in numpy out, tensor in tensor out."""
        as_numpy = not isinstance(observation, torch.Tensor)
        obs = torch.as_tensor(np.asarray(observation), dtype=torch.float32) if as_numpy else observation.float()
        single = obs.dim() == 1
        with torch.no_grad():
            action = policy(obs.unsqueeze(0) if single else obs)
        action = action.squeeze(0) if single else action
        return action.numpy() if as_numpy else action

    def make_env(self, seed: int | None = None):
        """A fresh environment of the run (a TorchRL env, as :func:`actorq.envs.make_env`)."""
        env = self.config.env
        return make_env(env.name, seed=seed, library=env.get("library"))

    def make_eval_env(self, episodes: int, seed: int):
        """The environment the run's evaluation plays ``episodes`` episodes in: a lean batch of
        ``episodes`` envs where the suite has one, else one env that plays them in turn."""
        env = self.config.env
        batched = make_batched_env(env.name, episodes, seed=seed, library=env.get("library"))
        return batched if batched is not None else self.make_env(seed)

    def __repr__(self) -> str:
        return (f"Agent({self.config.env.name}, {self.policy} policy at {self.precision}, "
                f"checkpoint={self.checkpoint})")


def load(run_dir: str | Path, ckpt: str | Path = LAST, policy: str = LEARNER) -> Agent:
    """The trained policy of a run dir.

    Args:
        run_dir: a run dir written by ``actorq train`` (``config.yaml``, ``checkpoints/``).
        ckpt: ``"last"`` (``checkpoints/last.ckpt``), a checkpoint's path, or the name of a file
            in the run's ``checkpoints/`` (e.g. ``"frames=800.ckpt"``).
        policy: ``"learner"`` (the learner's fp32 policy) or ``"quantized"`` (the actors'
            reduced-precision copy, at the run's ``quant`` setting).

    Raises:
        ConfigError: no such run dir or checkpoint, an unreadable one, or a bad ``policy``.
    """
    if policy not in POLICIES:
        raise ConfigError(f"policy={policy}: must be one of {', '.join(POLICIES)}")
    run_dir = Path(run_dir).expanduser()
    config = read_config(run_dir)
    path = find_checkpoint_file(run_dir, ckpt)
    checkpoint = read_checkpoint(path)
    learner = learner_from_config(config, checkpoint["state_dict"], path)
    if policy == LEARNER:
        return Agent(config, learner, learner.behaviour_network, policy, "fp32", path)
    network = saved_actors_network(checkpoint, learner.behaviour_network, path)
    return Agent(config, learner, network, policy, network.quant.describe(), path)


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
        env = make_env(cfg.env.name, seed=cfg.seed, library=cfg.env.get("library"))
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
        quant = QuantSpec(**state["quant"])
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
    layout = TrunkLayout.from_trunk(network.trunk)
    candidates = [quant] + [dataclasses.replace(quant, format=codec.name) for codec in registered()
                            if quant.format is None and codec.serves(quant)]
    for candidate in candidates:
        if set(candidate.codec.payload_spec(layout, candidate)) == set(payload):
            return candidate
    return quant  # load_payload says what does not fit


def _short(error: Any) -> str:
    """An exception as one short line."""
    return f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"
