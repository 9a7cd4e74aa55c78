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

from actorq.envs.registry import EnvSuite, register_suite
from actorq.envs.spec import OBSERVATION
from actorq.errors import ConfigError

if TYPE_CHECKING:
    from torchrl.envs import EnvBase

    from actorq.envs.batched import DMControlEnvs

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
        from actorq.envs.batched import DMControlEnvs

        domain, task = env_name.split("-", 1)
        return DMControlEnvs(domain, task, num_envs)
