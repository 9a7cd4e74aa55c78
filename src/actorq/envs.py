"""Environment factory: gymnasium and the DeepMind Control Suite behind one call.

Every environment comes out as a TorchRL ``EnvBase`` whose observation is a single flat
float32 vector under ``"observation"``, whose reward is float32, and whose discrete actions
(if any) are integer indices. Networks read their shapes from :class:`EnvSpec`.

Example:
    >>> env = make_env("CartPole-v1", seed=0)
    >>> spec = EnvSpec.from_env(env)
    >>> spec.obs_dim, spec.num_actions
    (4, 2)
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

import torch
from torchrl.envs import CatTensors, Compose, DoubleToFloat, EnvBase, RewardSum, TransformedEnv
from torchrl.envs.libs.dm_control import DMControlEnv
from torchrl.envs.libs.gym import GymEnv

from actorq.errors import ConfigError

OBSERVATION = "observation"

_GYM_ID = re.compile(r"^[\w:/.-]+-v\d+$")


@dataclass(frozen=True)
class EnvSpec:
    """What the networks need to know about an environment.

    Attributes:
        obs_dim: length of the flat observation vector.
        discrete: whether actions are integer indices.
        num_actions: number of discrete actions (0 for continuous).
        action_dim: length of a continuous action (0 for discrete).
        action_low: lower bound per continuous action dimension.
        action_high: upper bound per continuous action dimension.
    """

    obs_dim: int
    discrete: bool
    num_actions: int = 0
    action_dim: int = 0
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()

    @classmethod
    def from_env(cls, env: EnvBase) -> EnvSpec:
        """Reads the spec of an environment made by :func:`make_env`."""
        obs_dim = int(env.observation_spec[OBSERVATION].shape[-1])
        action_spec = env.full_action_spec[env.action_key]
        if action_spec.domain == "discrete":
            return cls(obs_dim=obs_dim, discrete=True, num_actions=int(action_spec.space.n))
        low = action_spec.space.low.reshape(-1).tolist()
        high = action_spec.space.high.reshape(-1).tolist()
        return cls(
            obs_dim=obs_dim,
            discrete=False,
            action_dim=len(low),
            action_low=tuple(low),
            action_high=tuple(high),
        )


def dm_control_tasks() -> list[str]:
    """All DeepMind Control Suite tasks as ``domain-task`` names."""
    from dm_control import suite

    return [f"{domain}-{task}" for domain, task in suite.ALL_TASKS]


def gym_ids() -> list[str]:
    import gymnasium

    return list(gymnasium.envs.registry.keys())


def backend_of(name: str) -> str:
    """Returns ``"gym"`` or ``"dm_control"`` for an env name, or raises a clear error."""
    if _GYM_ID.match(name):
        if name in gym_ids():
            return "gym"
        raise ConfigError(_unknown(name, gym_ids()))
    if name in dm_control_tasks():
        return "dm_control"
    raise ConfigError(_unknown(name, dm_control_tasks() + gym_ids()))


def _unknown(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return (
        f"unknown environment {name!r}: use a gymnasium id (e.g. 'CartPole-v1') or a "
        f"DeepMind Control Suite task as 'domain-task' (e.g. 'cheetah-run').{hint}"
    )


def make_env(name: str, seed: int | None = None, library: str | None = None) -> EnvBase:
    """Builds one environment with a flat float32 observation.

    Args:
        name: a gymnasium id (``"Pendulum-v1"``) or a dm_control task (``"walker-walk"``).
        seed: seed for the environment's random generator.

    Returns:
        A TorchRL environment with ``"observation"`` (float32, 1-D), float32 reward, and the
        running ``"episode_reward"``.
    """
    backend = backend_of(name)
    if backend == "gym":
        if name.endswith(("-v4", "-v5")):
            _require_gym_mujoco(name)
        base = GymEnv(name, categorical_action_encoding=True)
        env = TransformedEnv(base, Compose(DoubleToFloat(), RewardSum()))
    else:
        domain, task = name.split("-", 1)
        base = DMControlEnv(domain, task)
        obs_keys = [key for key in base.observation_spec.keys() if key != OBSERVATION]
        env = TransformedEnv(
            base,
            Compose(
                CatTensors(in_keys=obs_keys, out_key=OBSERVATION), DoubleToFloat(), RewardSum()
            ),
        )
        if OBSERVATION not in env.observation_spec.keys():  # pragma: no cover - defensive
            raise ConfigError(f"could not flatten the observations of {name!r}")
    if seed is not None:
        env.set_seed(seed)
    return env


def _require_gym_mujoco(name: str) -> None:
    try:
        import gymnasium.envs.mujoco  # noqa: F401
        import mujoco  # noqa: F401
    except ImportError as error:  # pragma: no cover - depends on the install
        raise ConfigError(
            f"{name!r} needs MuJoCo for gymnasium: pip install 'actorq[mujoco]'"
        ) from error


def rollout_return(env: EnvBase, act, episodes: int, max_steps: int = 100_000) -> list[float]:
    """Runs ``episodes`` full episodes with ``act(observation) -> action`` and returns their returns.

    Args:
        env: an environment made by :func:`make_env`.
        act: maps a batch of observations ``[B, obs_dim]`` to a batch of actions.
        episodes: how many episodes to run.
        max_steps: safety cap on the length of one episode.
    """
    returns = []
    with torch.no_grad():
        for _ in range(episodes):
            td = env.reset()
            total = 0.0
            for _ in range(max_steps):
                td["action"] = act(td[OBSERVATION].unsqueeze(0)).squeeze(0)
                td = env.step(td)
                total += float(td["next", "reward"].sum())
                if bool(td["next", "done"].any()):
                    break
                td = td["next"]
            returns.append(total)
    return returns


def random_observations(env: EnvBase, count: int) -> torch.Tensor:
    """``count`` observations from uniformly random actions (``[count, obs_dim]``)."""
    with torch.no_grad():
        steps = env.rollout(count, break_when_any_done=False)
    return steps[OBSERVATION].reshape(-1, steps[OBSERVATION].shape[-1])[:count]
