"""The gymnasium suite (``env.library: gymnasium``): every id in gymnasium's registry but
ale-py's Atari ids (the ``atari`` suite's, :mod:`actorq.envs.atari`), and any function or
class of your own that returns a ``gymnasium.Env``, named by where it is defined:
``module:name``.

An env factory reaches the actor worker processes by that name (each worker imports the
module), so it must be defined at the top level of a module: a lambda, a function defined
inside another, a ``functools.partial`` or a bound method has no such name
(:func:`factory_name` refuses them). A factory defined in the script that runs
``actorq.learn`` is ``__main__:name``, which the workers find too (they import that script),
but a later process that loads the run (``actorq evaluate``) does not: define it in a module
of its own for that.

Example:
    >>> suite = GymnasiumSuite()
    >>> suite.knows("CartPole-v1"), suite.knows("cheetah-run"), suite.knows("PongNoFrameskip-v4")
    (True, False, False)
    >>> suite.knows("gymnasium.envs.classic_control:AcrobotEnv")  # an env class: a factory
    True
    >>> factory_name(gymnasium.envs.classic_control.AcrobotEnv)
    'gymnasium.envs.classic_control.acrobot:AcrobotEnv'
    >>> needs_mujoco("HalfCheetah-v5"), needs_mujoco("Pendulum-v1")
    (True, False)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np

from actorq.envs.raw import RawEnvs
from actorq.envs.registry import EnvSuite, register_suite
from actorq.util.errors import ConfigError

if TYPE_CHECKING:
    from torchrl.envs import EnvBase


ALE_ENTRY_POINT = "ale_py.env:AtariEnv"
"""What ale-py's gymnasium ids make: the atari suite builds those games."""


def gym_ids() -> list[str]:
    """Every id in gymnasium's registry (including ids registered at run time) but ale-py's."""
    return [env_id for env_id, spec in gymnasium.envs.registry.items() if spec.entry_point != ALE_ENTRY_POINT]


def env_factory(env_name: str) -> Callable[[], Any] | None:
    """The function or class ``module:name`` names (``None`` for a name without a colon, or
    one that names nothing callable).

    Raises:
        ConfigError: the module cannot be imported (naming it and its error, in one line).
    """
    module_name, colon, qualname = env_name.partition(":")
    if not colon or not module_name or not qualname:
        return None
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001  any failure of the user's module is a bad env.name
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise ConfigError(f"env.name {env_name!r}: cannot import {module_name!r}: "
                          f"{type(error).__name__}: {first_line}") from error
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return target if callable(target) else None


def factory_name(factory: Callable[[], Any]) -> str:
    """``module:name`` for a function or class that returns a ``gymnasium.Env``, the name by
    which actor processes import it.

    Raises:
        ConfigError: ``factory`` has no such name (a lambda, a nested function, a
            ``functools.partial``, a bound method): say how to give it one.
    """
    module, qualname = getattr(factory, "__module__", None), getattr(factory, "__qualname__", None)
    name = f"{module}:{qualname}"
    if not module or not qualname or env_factory(name) is not factory:
        raise ConfigError(f"env={factory!r}: an env factory reaches the actor processes by its name, module:name, "
                          "so it must be a function or class defined at the top level of a module "
                          "(not a lambda, a nested function, a partial or a bound method)")
    return name


def needs_mujoco(env_id: str) -> bool:
    """Whether a gymnasium id is one of gymnasium's MuJoCo environments (the mujoco extra)."""
    spec = gymnasium.envs.registry.get(env_id)
    entry_point = spec.entry_point if spec is not None else None
    return isinstance(entry_point, str) and entry_point.startswith("gymnasium.envs.mujoco")


def mujoco_available() -> bool:
    """Whether gymnasium's MuJoCo environments can be built (``pip install 'actorq[mujoco]'``)."""
    try:
        import gymnasium.envs.mujoco  # noqa: F401
        import mujoco  # noqa: F401
    except ImportError:
        return False
    return True


def env_maker(env_name: str) -> Callable[[], Any]:
    """What makes one env of ``env_name``: ``gymnasium.make`` of an id, or the factory
    ``module:name`` names, checked to return a ``gymnasium.Env``."""
    if needs_mujoco(env_name) and not mujoco_available():
        raise ConfigError(f"{env_name!r} needs MuJoCo for gymnasium: pip install 'actorq[mujoco]'")
    factory = env_factory(env_name) if env_name not in gymnasium.envs.registry else None
    return partial(gymnasium.make, env_name) if factory is None else partial(_checked_env, env_name, factory)


def _checked_env(env_name: str, factory: Callable[[], Any]) -> gymnasium.Env:
    env = factory()
    if not isinstance(env, gymnasium.Env):
        raise ConfigError(f"env factory {env_name} returned {type(env).__name__}, not a gymnasium.Env")
    return env


@register_suite
class GymnasiumSuite(EnvSuite):
    """gymnasium ids such as ``"CartPole-v1"`` (ale-py's aside) and env factories named
    ``module:name``; discrete actions come out as integer indices."""

    name = "gymnasium"

    def names(self) -> list[str]:
        return gym_ids()

    def knows(self, env_name: str) -> bool:
        spec = gymnasium.envs.registry.get(env_name)
        if spec is not None:
            return spec.entry_point != ALE_ENTRY_POINT
        return env_factory(env_name) is not None

    def make(self, env_name: str, seed: int | None) -> EnvBase:
        from torchrl.envs import Compose, DoubleToFloat, RewardSum, TransformedEnv
        from torchrl.envs.libs.gym import GymEnv, GymWrapper

        make = env_maker(env_name)
        base = (GymEnv(env_name, categorical_action_encoding=True) if env_name in gymnasium.envs.registry
                else GymWrapper(make(), categorical_action_encoding=True))
        env = TransformedEnv(base, Compose(DoubleToFloat(), RewardSum()))
        if seed is not None:
            env.set_seed(seed)
        return env

    def make_raw(self, env_name: str, num_envs: int) -> GymnasiumEnvs | None:
        make = env_maker(env_name)
        if not GymnasiumEnvs.supports(env_name, make):
            return None  # e.g. dict or image observations: the TorchRL path handles them
        return GymnasiumEnvs(env_name, num_envs, make=make)


class GymnasiumEnvs(RawEnvs):
    """``n`` gymnasium envs (``gymnasium.make``, or ``make()`` for an env class of a suite's
    own) with a 1-D Box observation and a Box or Discrete action space; discrete actions are
    integer indices."""

    def __init__(self, env_id: str, n: int, make: Callable[[], Any] | None = None):
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
    def supports(env_id: str, make: Callable[[], Any] | None = None) -> bool:
        """Whether the lean path can run ``env_id`` (flat Box observation; Box or Discrete
        actions), made by ``make`` if given."""
        from gymnasium import spaces

        env = gymnasium.make(env_id) if make is None else make()
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
