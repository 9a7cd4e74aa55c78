"""A trained run as a policy: ``actorq.load(run_dir)`` -> an :class:`Agent` that acts
(``act``, ``predict``), plays evaluation episodes (``evaluate``), saves itself as one file
that ``actorq.load`` reads back (``save``) and writes its policy as one file plain ``torch`` runs (``export``).

The learner is rebuilt from the run dir's ``config.yaml`` and a checkpoint
(:mod:`actorq.tools.rebuild`). The agent plays either the learner's fp32 policy or the
actors' reduced-precision copy: the payload they last received, as the checkpoint holds it.
Anything wrong with the run dir or the checkpoint is one
:class:`~actorq.util.errors.ConfigError` line.

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

from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from actorq.callbacks.evaluation import greedy
from actorq.envs import EnvSpec, make_env
from actorq.envs import make_batched_env, rollout_return
from actorq.experience import CALIBRATION_OBSERVATIONS
from actorq.util.errors import ConfigError
from actorq.run.resume import EXPERIENCE_STATE, LAST, read_checkpoint
from actorq.tools.standalone import export_checkpoint
from actorq.tools.rebuild import find_checkpoint_file, learner_from_config, read_config, saved_actors_network

LEARNER, QUANTIZED = "learner", "quantized"
POLICIES = (LEARNER, QUANTIZED)
AGENT_FILE = "actorq_agent"
"""The key that marks a file :meth:`Agent.save` wrote (and the policy the agent played)."""
ACTORS_STATE = ("quant", "payload", "rung", "head", "normalizer", CALIBRATION_OBSERVATIONS)
"""What a saved agent keeps of a checkpoint's actor state: their last version and calibration."""


class Agent:
    """The greedy policy of a trained run (no exploration; argmax for Q-networks).

    Attributes:
        config: the run's config (``config.yaml``), e.g. ``agent.config.env.name``.
        spec: the environment's :class:`~actorq.envs.EnvSpec` (shapes, action space).
        learner: the rebuilt learner with the checkpoint's weights.
        network: the network that acts: the learner's fp32 policy or the actors' copy.
        policy: ``"learner"`` or ``"quantized"``.
        precision: what ``network`` runs at, e.g. ``"fp32"`` or ``"int8 static per_tensor"``.
        checkpoint: the checkpoint file the weights came from (``None``: a run that saved none).
        summary: the run's ``summary.json`` when :func:`actorq.learn` trained it, else ``None``.
    """

    def __init__(self, config: DictConfig, learner, network: nn.Module, policy: str, precision: str,
                 checkpoint: Path | None):
        self.config = config
        self.learner = learner
        self.spec: EnvSpec = learner.spec
        self.network = network
        self.policy = policy
        self.precision = precision
        self.checkpoint = checkpoint
        self.summary: dict | None = None  # the run's summary.json, when actorq.learn trained it

    def act(self, observation: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """The greedy action for one observation ``[obs_dim]`` or a batch ``[B, obs_dim]``.

        A numpy observation gives a numpy action, a tensor a tensor; discrete actions are
        integer indices.
        """
        return self._run(greedy(self.network, self.spec.discrete), observation)

    def predict(self, observation: np.ndarray | torch.Tensor, deterministic: bool = False
                ) -> tuple[np.ndarray | torch.Tensor, None]:
        """Stable-Baselines3's call, with its default: ``(action, None)`` for one observation or
        a batch.

        ``deterministic=True`` is :meth:`act`. With ``False`` (the default, as SB3's) a
        stochastic policy (PPO, SAC) samples its action; a Q-network or a deterministic actor
        has no distribution and gives its greedy action either way (as SB3's TD3 does; SB3's
        DQN would act epsilon-greedy).
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

    def evaluate(self, episodes: int = 10, seed: int | None = None, deterministic: bool | None = None,
                 return_episode_rewards: bool = False) -> tuple[float, float] | list[float]:
        """Stable-Baselines3's ``evaluate_policy`` as a method: the mean and standard deviation
        of the returns of ``episodes`` episodes, or with ``return_episode_rewards`` the returns
        themselves, one per episode. The episodes are played as the run's evaluation plays
        them: seeded from ``seed`` (by default the run's own), greedy, or sampled where
        ``deterministic`` is False (by default as the run's ``eval.deterministic``)."""
        if not (isinstance(episodes, int) and episodes > 0):
            raise ConfigError(f"episodes={episodes!r}: must be a positive integer")
        seed = self.config.get("seed", 0) if seed is None else seed
        if deterministic is None:
            deterministic = bool(self.config.get("eval", {}).get("deterministic", True))
        act = self.act if deterministic else (lambda observation: self.predict(observation, deterministic=False)[0])
        returns = rollout_return(self.make_eval_env(episodes, seed), act, episodes)
        if return_episode_rewards:
            return returns
        return float(np.mean(returns)), float(np.std(returns))

    def save(self, path: str | Path) -> Path:
        """Writes this agent as one file that :func:`load` reads back (``actorq.load(path)``):
        the run's config, the learner's weights and, where the run saved them, the actors'
        last version and the observations it calibrates on; a checkpoint without the
        optimizer's state or the replay. ``actorq export`` takes the file as it takes a
        checkpoint. Returns the path written."""
        saved = {"datamodule_hyper_parameters": {"config": OmegaConf.to_container(self.config, resolve=True)},
                 "state_dict": self.learner.state_dict(), AGENT_FILE: {"policy": self.policy}}
        if self.checkpoint is not None:
            actors = read_checkpoint(self.checkpoint).get(EXPERIENCE_STATE, {})
            saved[EXPERIENCE_STATE] = {key: value for key, value in actors.items() if key in ACTORS_STATE}
        path = Path(path).expanduser()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(saved, path)
        except OSError as error:
            raise ConfigError(f"cannot write {path}: {error.strerror or error}") from error
        return path

    def export(self, path: str | Path, bits: int | None = None) -> Path:
        """Writes the actors' policy of this agent's checkpoint as one file plain ``torch`` runs
        (what ``actorq export`` writes; :func:`actorq.tools.standalone.export_checkpoint`): an
        ExportedProgram if ``path`` ends in ``.pt2``, else TorchScript. Returns its path. The
        policy is the payload the actors last received (an fp32 run's fp32 policy), or a
        fresh quantization at ``bits``."""
        if self.checkpoint is None:
            raise ConfigError("this run saved no checkpoint (callbacks=no_checkpoint): nothing to export")
        return export_checkpoint(self.checkpoint, path, bits)

    def make_env(self, seed: int | None = None):
        """A fresh environment of the run (a TorchRL env, as :func:`actorq.envs.make_env`)."""
        env = self.config.env
        return make_env(env.name, seed=seed, library=env.get("library"), options=env.get("options"))

    def make_eval_env(self, episodes: int, seed: int):
        """The environment the run's evaluation plays ``episodes`` episodes in: a lean batch of
        ``episodes`` envs where the suite has one, else one env that plays them in turn."""
        env = self.config.env
        batched = make_batched_env(env.name, episodes, seed=seed, library=env.get("library"), evaluation=True,
                                   options=env.get("options"))
        return batched if batched is not None else self.make_env(seed)

    def __repr__(self) -> str:
        return (f"Agent({self.config.env.name}, {self.policy} policy at {self.precision}, "
                f"checkpoint={self.checkpoint})")


def load(run_dir: str | Path, ckpt: str | Path = LAST, policy: str | None = None) -> Agent:
    """The trained policy of a run dir, or of a file :meth:`Agent.save` wrote.

    Args:
        run_dir: a run dir written by ``actorq train`` (``config.yaml``, ``checkpoints/``), or
            a file written by :meth:`Agent.save` (then ``ckpt`` is not read).
        ckpt: ``"last"`` (``checkpoints/last.ckpt``), a checkpoint's path, or the name of a file
            in the run's ``checkpoints/`` (e.g. ``"frames=800.ckpt"``).
        policy: ``"learner"`` (the learner's fp32 policy; the default for a run dir) or
            ``"quantized"`` (the actors' reduced-precision copy, at the run's ``quant``
            setting); for a saved agent, by default the policy it played.

    Raises:
        ConfigError: no such run dir or checkpoint, an unreadable one, or a bad ``policy``.
    """
    if policy not in (None, *POLICIES):
        raise ConfigError(f"policy={policy}: must be one of {', '.join(POLICIES)}")
    run_dir = Path(run_dir).expanduser()
    if run_dir.is_file():
        return _load_file(run_dir, policy)
    config = read_config(run_dir)
    path = find_checkpoint_file(run_dir, ckpt)
    return _agent(config, read_checkpoint(path), path, policy or LEARNER)


def _load_file(path: Path, policy: str | None) -> Agent:
    """The agent of a file :meth:`Agent.save` wrote (or of a run's checkpoint file)."""
    checkpoint = read_checkpoint(path)
    config = (checkpoint.get("datamodule_hyper_parameters") or {}).get("config")
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: not an agent saved by actorq (no run config inside)")
    policy = policy or checkpoint.get(AGENT_FILE, {}).get("policy", LEARNER)
    return _agent(OmegaConf.create(config), checkpoint, path, policy)


def _agent(config: DictConfig, checkpoint: dict, path: Path, policy: str) -> Agent:
    learner = learner_from_config(config, checkpoint["state_dict"], path)
    if policy == LEARNER:
        return Agent(config, learner, learner.behaviour_network, policy, "fp32", path)
    network = saved_actors_network(checkpoint, learner.behaviour_network, path)
    return Agent(config, learner, network, policy, network.quant.describe(), path)




