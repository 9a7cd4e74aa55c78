"""Sleep-bound envs with heavy-tailed step times, for the lock-step benchmarks.

``"heavy-tail"`` (suite ``heavy_tail``) takes :data:`FAST_S` per step, and :data:`SLOW_S`
with probability :data:`SLOW_P` (seeded): the shape of envs whose steps now and then stall
(a physics solver that struggles, a simulator behind a network). ``"heavy-tail-F-S"`` takes
F ms per step and S ms now and then (:func:`heavy_tail_name`). ``"heavy-tail-cartpole"`` is
CartPole-v1 whose steps take :data:`CARTPOLE_FAST_S`, and :data:`CARTPOLE_SLOW_S` with
probability :data:`SLOW_P` (the case study's shape: most steps ~3 ms, some ~100 ms): a task
that can be learned, for on-policy training against a lock-step vectorized env. Its steps sleep, so many
actors of it fit on a few cores, as long as the collector's own work per step (a fraction of
a millisecond of CPU) stays small beside the sleep.

Actor workers are separate processes with their own suite registry: this module registers
its suite at import time, and :class:`ZeroPolicy` lives here too, so unpickling the policy in
a worker imports the module, which registers the suite there before the worker builds its env.
"""

from __future__ import annotations

import re
import time
from functools import partial

import gymnasium
import numpy as np
import torch
from torch import nn
from torchrl.envs import Compose, RewardSum, TransformedEnv
from torchrl.envs.libs.gym import GymWrapper

from actorq.envs import EnvSuite, register_suite, suites
from actorq.envs.gymnasium import GymnasiumEnvs

FAST_S, SLOW_S, SLOW_P = 0.003, 0.300, 0.01
CARTPOLE_FAST_S, CARTPOLE_SLOW_S = 0.003, 0.100
EPISODE = 100
_NAME = re.compile(r"heavy-tail(?:-(\d+)-(\d+))?")
CARTPOLE = "heavy-tail-cartpole"


def heavy_tail_name(fast_ms: int, slow_ms: int) -> str:
    """The env name of steps of ``fast_ms``, and ``slow_ms`` with probability :data:`SLOW_P`."""
    return f"heavy-tail-{fast_ms}-{slow_ms}"


def step_times(env_name: str) -> tuple[float, float]:
    """(usual, slow) seconds per step of a heavy-tail env name."""
    match = _NAME.fullmatch(env_name)
    if match is None:
        raise ValueError(f"not a heavy-tail env name: {env_name!r}")
    if match.group(1) is None:
        return FAST_S, SLOW_S
    return int(match.group(1)) / 1e3, int(match.group(2)) / 1e3


class HeavyTail(gymnasium.Env):
    """Observation ``[t]`` (float32), reward 0, truncated every :data:`EPISODE` steps."""

    def __init__(self, fast_s: float = FAST_S, slow_s: float = SLOW_S):
        self.fast_s, self.slow_s = fast_s, slow_s
        self.observation_space = gymnasium.spaces.Box(-1e9, 1e9, shape=(1,), dtype=np.float32)
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.rng = np.random.default_rng()
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        time.sleep(self.slow_s if self.rng.random() < SLOW_P else self.fast_s)
        self.t += 1
        return np.array([self.t], dtype=np.float32), 0.0, False, self.t >= EPISODE, {}


class HeavyTailCartPole(gymnasium.Wrapper):
    """CartPole-v1 whose every step sleeps ``fast_s``, or ``slow_s`` with probability
    :data:`SLOW_P` (drawn from its own generator, seeded at ``reset(seed=...)``)."""

    def __init__(self, fast_s: float = CARTPOLE_FAST_S, slow_s: float = CARTPOLE_SLOW_S):
        super().__init__(gymnasium.make("CartPole-v1"))
        self.fast_s, self.slow_s = fast_s, slow_s
        self.stalls = np.random.default_rng()

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.stalls = np.random.default_rng(seed + 1_000_003)
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        time.sleep(self.slow_s if self.stalls.random() < SLOW_P else self.fast_s)
        return self.env.step(action)


def _make_gym(env_name: str) -> gymnasium.Env:
    return HeavyTailCartPole() if env_name == CARTPOLE else HeavyTail(*step_times(env_name))


class HeavyTailSuite(EnvSuite):
    name = "heavy_tail"

    def names(self):
        return ["heavy-tail", CARTPOLE]

    def knows(self, env_name):
        return env_name == CARTPOLE or _NAME.fullmatch(env_name) is not None

    def make(self, env_name, seed):
        env = TransformedEnv(GymWrapper(_make_gym(env_name)), Compose(RewardSum()))
        if seed is not None:
            env.set_seed(seed)
        return env

    def make_raw(self, env_name, num_envs):
        # The lean path, as actors run real envs: the benchmark then times the collection
        # scheme, not TorchRL's per-step transforms in 8 processes on a few cores.
        return GymnasiumEnvs(env_name, num_envs, make=partial(_make_gym, env_name))


if HeavyTailSuite.name not in suites():  # workers import this module when they unpickle the policy
    register_suite(HeavyTailSuite)


class ZeroPolicy(nn.Module):
    """Action 0 whatever the observation: the benchmark times collection, not inference."""

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return torch.zeros(*observation.shape[:-1], 1)
