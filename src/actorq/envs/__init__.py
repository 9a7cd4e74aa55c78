"""Environments: gymnasium, the DeepMind Control Suite, and suites of your own behind one call.

Every environment comes out as a TorchRL ``EnvBase`` whose observation is a single flat
float32 vector under ``"observation"``, whose reward is float32, and whose discrete actions
(if any) are integer indices. Networks read their shapes from :class:`EnvSpec`. Which suite
builds an environment is ``env.library`` in the configs (see :mod:`actorq.envs.registry`).

Example:
    >>> env = make_env("CartPole-v1", seed=0, library="gymnasium")
    >>> spec = EnvSpec.from_env(env)
    >>> spec.obs_dim, spec.num_actions
    (4, 2)
"""

from actorq.envs.registry import (
    EnvSuite,
    find_suite,
    import_suites,
    make_batched_env,
    make_env,
    register_suite,
    suite_modules,
    suite_options,
    suites,
    unregister_suite,
)
from actorq.envs.spec import OBSERVATION, EnvSpec, random_observations, rollout_return

# The built-in suites register themselves on import.
from actorq.envs.dm_control import DMControlSuite, dm_control_tasks  # noqa: E402  isort: skip
from actorq.envs.gymnasium import GymnasiumSuite, gym_ids  # noqa: E402  isort: skip
from actorq.envs.atari import AtariSuite  # noqa: E402  isort: skip

__all__ = [
    "OBSERVATION",
    "AtariSuite",
    "DMControlSuite",
    "EnvSpec",
    "EnvSuite",
    "GymnasiumSuite",
    "dm_control_tasks",
    "find_suite",
    "gym_ids",
    "import_suites",
    "make_batched_env",
    "make_env",
    "random_observations",
    "register_suite",
    "rollout_return",
    "suite_modules",
    "suite_options",
    "suites",
    "unregister_suite",
]
