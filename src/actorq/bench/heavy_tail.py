"""A sleep-bound env with heavy-tailed step times, for the lock-step benchmark.

``"heavy-tail"`` (suite ``heavy_tail``) takes :data:`FAST_S` per step, and :data:`SLOW_S`
with probability :data:`SLOW_P` (seeded): the shape of envs whose steps now and then stall
(a physics solver that struggles, a simulator behind a network). Its steps sleep, so many
actors of it fit on a 2-core machine and the rates measure the collection scheme alone.

Actor workers are separate processes with their own suite registry: this module registers
its suite at import time, and :class:`ZeroPolicy` lives here too, so unpickling the policy in
a worker imports the module, which registers the suite there before the worker builds its env.
"""

from __future__ import annotations

import time

import gymnasium
import numpy as np
import torch
from torch import nn
from torchrl.envs import Compose, RewardSum, TransformedEnv
from torchrl.envs.libs.gym import GymWrapper

from actorq.envs import EnvSuite, register_suite, suites
from actorq.envs.batched import GymnasiumEnvs

FAST_S, SLOW_S, SLOW_P = 0.003, 0.300, 0.01
EPISODE = 100


class HeavyTail(gymnasium.Env):
    """Observation ``[t]`` (float32), reward 0, truncated every :data:`EPISODE` steps."""

    def __init__(self):
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
        time.sleep(SLOW_S if self.rng.random() < SLOW_P else FAST_S)
        self.t += 1
        return np.array([self.t], dtype=np.float32), 0.0, False, self.t >= EPISODE, {}


class HeavyTailSuite(EnvSuite):
    name = "heavy_tail"

    def names(self):
        return ["heavy-tail"]

    def make(self, env_name, seed):
        env = TransformedEnv(GymWrapper(HeavyTail()), Compose(RewardSum()))
        if seed is not None:
            env.set_seed(seed)
        return env

    def make_raw(self, env_name, num_envs):
        # The lean path, as actors run real envs: the benchmark then times the collection
        # scheme, not TorchRL's per-step transforms in 8 processes on a few cores.
        return GymnasiumEnvs(env_name, num_envs, make=HeavyTail)


if HeavyTailSuite.name not in suites():  # workers import this module when they unpickle the policy
    register_suite(HeavyTailSuite)


class ZeroPolicy(nn.Module):
    """Action 0 whatever the observation: the benchmark times collection, not inference."""

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return torch.zeros(*observation.shape[:-1], 1)
