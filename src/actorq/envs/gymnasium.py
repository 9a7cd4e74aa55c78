"""The gymnasium suite (``env.library: gymnasium``): every id in gymnasium's registry.

Example:
    >>> suite = GymnasiumSuite()
    >>> suite.knows("CartPole-v1"), suite.knows("cheetah-run")
    (True, False)
    >>> needs_mujoco("HalfCheetah-v5"), needs_mujoco("Pendulum-v1")
    (True, False)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from actorq.envs.raw import RawEnvs
from actorq.envs.registry import EnvSuite, register_suite
from actorq.util.errors import ConfigError

if TYPE_CHECKING:
    from torchrl.envs import EnvBase


def gym_ids() -> list[str]:
    """Every id in gymnasium's registry (including ids registered at run time)."""
    import gymnasium

    return list(gymnasium.envs.registry.keys())


def needs_mujoco(env_id: str) -> bool:
    """Whether a gymnasium id is one of gymnasium's MuJoCo environments (the mujoco extra)."""
    import gymnasium

    entry_point = gymnasium.envs.registry[env_id].entry_point
    return isinstance(entry_point, str) and entry_point.startswith("gymnasium.envs.mujoco")


def mujoco_available() -> bool:
    """Whether gymnasium's MuJoCo environments can be built (``pip install 'actorq[mujoco]'``)."""
    try:
        import gymnasium.envs.mujoco  # noqa: F401
        import mujoco  # noqa: F401
    except ImportError:
        return False
    return True


@register_suite
class GymnasiumSuite(EnvSuite):
    """gymnasium ids such as ``"CartPole-v1"``; discrete actions come out as integer indices."""

    name = "gymnasium"

    def names(self) -> list[str]:
        return gym_ids()

    def knows(self, env_name: str) -> bool:
        import gymnasium

        return env_name in gymnasium.envs.registry

    def make(self, env_name: str, seed: int | None) -> EnvBase:
        from torchrl.envs import Compose, DoubleToFloat, RewardSum, TransformedEnv
        from torchrl.envs.libs.gym import GymEnv

        if needs_mujoco(env_name) and not mujoco_available():
            raise ConfigError(f"{env_name!r} needs MuJoCo for gymnasium: pip install 'actorq[mujoco]'")
        env = TransformedEnv(
            GymEnv(env_name, categorical_action_encoding=True), Compose(DoubleToFloat(), RewardSum())
        )
        if seed is not None:
            env.set_seed(seed)
        return env

    def make_raw(self, env_name: str, num_envs: int) -> GymnasiumEnvs | None:
        if needs_mujoco(env_name) and not mujoco_available():
            raise ConfigError(f"{env_name!r} needs MuJoCo for gymnasium: pip install 'actorq[mujoco]'")
        if not GymnasiumEnvs.supports(env_name):
            return None  # e.g. dict or image observations: the TorchRL path handles them
        return GymnasiumEnvs(env_name, num_envs)


class GymnasiumEnvs(RawEnvs):
    """``n`` gymnasium envs (``gymnasium.make``, or ``make()`` for an env class of a suite's
    own) with a 1-D Box observation and a Box or Discrete action space; discrete actions are
    integer indices."""

    def __init__(self, env_id: str, n: int, make: Callable[[], Any] | None = None):
        import gymnasium

        self.n = n
        self.envs = [gymnasium.make(env_id) if make is None else make() for _ in range(n)]
        env = self.envs[0]
        self.obs_dim = int(env.observation_space.shape[0])
        space = env.action_space
        if isinstance(space, gymnasium.spaces.Discrete):
            self.discrete, self.num_actions = True, int(space.n)
            self._start = int(space.start)
        else:
            self.action_low = np.asarray(space.low, dtype=np.float32).reshape(-1)
            self.action_high = np.asarray(space.high, dtype=np.float32).reshape(-1)

    @staticmethod
    def supports(env_id: str) -> bool:
        """Whether the lean path can run ``env_id`` (flat Box observation; Box or Discrete actions)."""
        import gymnasium
        from gymnasium import spaces

        env = gymnasium.make(env_id)
        try:
            obs, act = env.observation_space, env.action_space
            return (isinstance(obs, spaces.Box) and len(obs.shape) == 1
                    and (isinstance(act, spaces.Discrete) or (isinstance(act, spaces.Box) and len(act.shape) == 1)))
        finally:
            env.close()

    def step(self, actions, obs, reward, terminated, truncated) -> None:
        discrete = self.discrete
        for i, env in enumerate(self.envs):
            action = int(actions[i]) + self._start if discrete else actions[i]
            observation, r, term, trunc, _ = env.step(action)
            obs[i] = observation
            reward[i] = r
            terminated[i] = term
            truncated[i] = trunc

    def reset(self, index, obs) -> None:
        obs[:] = self.envs[index].reset()[0]

    def seed(self, index, seed) -> None:
        # GymEnv._set_seed (gymnasium): reset(seed=seed).
        self.envs[index].reset(seed=seed)
