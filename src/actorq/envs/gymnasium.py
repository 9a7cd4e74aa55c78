"""The gymnasium suite (``env.library: gymnasium``): every id in gymnasium's registry.

Example:
    >>> suite = GymnasiumSuite()
    >>> suite.knows("CartPole-v1"), suite.knows("cheetah-run")
    (True, False)
    >>> needs_mujoco("HalfCheetah-v5"), needs_mujoco("Pendulum-v1")
    (True, False)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actorq.envs.registry import EnvSuite, register_suite
from actorq.errors import ConfigError

if TYPE_CHECKING:
    from torchrl.envs import EnvBase

    from actorq.envs.batched import GymnasiumEnvs


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
        from actorq.envs.batched import GymnasiumEnvs

        if needs_mujoco(env_name) and not mujoco_available():
            raise ConfigError(f"{env_name!r} needs MuJoCo for gymnasium: pip install 'actorq[mujoco]'")
        if not GymnasiumEnvs.supports(env_name):
            return None  # e.g. dict or image observations: the TorchRL path handles them
        return GymnasiumEnvs(env_name, num_envs)
