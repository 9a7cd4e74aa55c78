"""The DeepMind Control Suite (``env.library: dm_control``): tasks named ``domain-task``.

The observations of a task (a dict of arrays) are concatenated into one flat float32
``"observation"``.

Example:
    >>> suite = DMControlSuite()
    >>> suite.knows("cheetah-run"), suite.knows("CartPole-v1")
    (True, False)
    >>> "walker-walk" in dm_control_tasks()
    True
"""

from __future__ import annotations

import logging
import re
import warnings
from typing import TYPE_CHECKING

import numpy as np

from actorq.envs.raw import RawEnvs
from actorq.envs.registry import EnvSuite, register_suite
from actorq.envs.spec import OBSERVATION
from actorq.util.errors import ConfigError

if TYPE_CHECKING:
    from torchrl.envs import EnvBase

# Every dm_control task name has this form; a name without it is not a task, and answering
# that needs no import of dm_control (which loads MuJoCo). It only ever says no.
_DOMAIN_TASK = re.compile(r"[a-z0-9_]+-[a-z0-9_]+")


class _KnownHarmless(logging.Filter):
    """Drops absl's "'settotalmass' is deprecated" warning (MuJoCo's compiler, on cheetah's XML)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "'settotalmass' is deprecated" not in record.getMessage()


_QUIET = False


def quiet_dm_control() -> None:
    """Silences two known-harmless warnings of importing and loading dm_control, once per process.

    GLFW warns that ``DISPLAY`` is missing when dm_control probes it as a rendering backend
    on a headless machine; MuJoCo's compiler warns (through absl) that cheetah's
    ``settotalmass`` attribute is deprecated. Only these two messages are filtered: every
    other warning and log record still shows.
    """
    global _QUIET
    if _QUIET:
        return
    _QUIET = True
    warnings.filterwarnings("ignore", message=r".*The DISPLAY environment variable is missing", module="glfw")
    logging.getLogger("absl").addFilter(_KnownHarmless())


def dm_control_tasks() -> list[str]:
    """All DeepMind Control Suite tasks as ``domain-task`` names."""
    quiet_dm_control()
    from dm_control import suite

    return [f"{domain}-{task}" for domain, task in suite.ALL_TASKS]


@register_suite
class DMControlSuite(EnvSuite):
    """DeepMind Control Suite tasks such as ``"cheetah-run"`` (domain ``cheetah``, task ``run``)."""

    name = "dm_control"

    def names(self) -> list[str]:
        return dm_control_tasks()

    def knows(self, env_name: str) -> bool:
        return _DOMAIN_TASK.fullmatch(env_name) is not None and env_name in self.names()

    def make(self, env_name: str, seed: int | None) -> EnvBase:
        from torchrl.envs import CatTensors, Compose, DoubleToFloat, RewardSum, TransformedEnv
        quiet_dm_control()
        from torchrl.envs.libs.dm_control import DMControlEnv

        domain, task = env_name.split("-", 1)
        base = DMControlEnv(domain, task)
        obs_keys = [key for key in base.observation_spec.keys() if key != OBSERVATION]
        env = TransformedEnv(
            base,
            Compose(CatTensors(in_keys=obs_keys, out_key=OBSERVATION), DoubleToFloat(), RewardSum()),
        )
        if OBSERVATION not in env.observation_spec.keys():  # pragma: no cover - defensive
            raise ConfigError(f"could not flatten the observations of {env_name!r}")
        if seed is not None:
            env.set_seed(seed)
        return env

    def make_raw(self, env_name: str, num_envs: int) -> DMControlEnvs:
        domain, task = env_name.split("-", 1)
        return DMControlEnvs(domain, task, num_envs)


class DMControlEnvs(RawEnvs):
    """``n`` dm_control suite envs; observations concatenated in sorted key order (as
    ``CatTensors`` orders them), time-limit ends are truncations (discount stays 1)."""

    def __init__(self, domain: str, task: str, n: int):
        quiet_dm_control()
        from dm_control import suite

        self.n = n
        self.envs = [suite.load(domain, task) for _ in range(n)]
        env = self.envs[0]
        specs = env.observation_spec()
        self.keys = sorted(specs)  # CatTensors(sort=True)
        sizes = [max(1, int(np.prod(specs[key].shape))) for key in self.keys]
        self.slices = []
        start = 0
        for key, size in zip(self.keys, sizes):
            self.slices.append((key, start, start + size))
            start += size
        self.obs_dim = start
        action = env.action_spec()
        self.action_low = np.asarray(action.minimum, dtype=np.float32).reshape(-1)
        self.action_high = np.asarray(action.maximum, dtype=np.float32).reshape(-1)
        self._row = np.empty(self.obs_dim, dtype=np.float64)

    def _write(self, observation, obs: np.ndarray) -> None:
        row = self._row
        for key, start, end in self.slices:
            row[start:end] = np.ravel(observation[key])
        obs[:] = row  # float64 -> float32 per element, as DoubleToFloat casts the whole vector

    def step(self, actions, obs, reward, terminated, truncated) -> None:
        for i, env in enumerate(self.envs):
            ts = env.step(actions[i])
            self._write(ts.observation, obs[i])
            reward[i] = ts.reward or 0.0
            if ts.step_type == 2:  # StepType.LAST
                if np.isclose(ts.discount, 1):
                    truncated[i] = True
                else:
                    terminated[i] = True

    def reset(self, index, obs) -> None:
        self._write(self.envs[index].reset().observation, obs)

    def seed(self, index, seed) -> None:
        # DMControlEnv._set_seed: a fresh RandomState for the task, then one reset.
        self.envs[index].task._random = np.random.RandomState(seed)
        self.envs[index].reset()
