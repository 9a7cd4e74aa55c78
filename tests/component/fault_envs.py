"""A tiny env suite for actor-fault tests: every step says which worker took it, and a chosen
worker can be made to raise at a chosen step (RLlib's fault-injection idea).

Actor workers are separate processes with their own suite registry, so this module
registers its suite at import time, and :class:`ConstantAction` lives here too: unpickling the
policy in a worker imports this module, which registers the suite there before the worker
builds its env.

Env names (``library="faults"``):

- ``"count"``: observation ``[worker, t]``, where ``worker`` is
  :func:`actorq.actors.pool.worker_index` and ``t`` counts the env's steps since it was
  built (episodes of :data:`EPISODE` steps do not reset it). So the frames one worker
  collected are exactly ``t = 0, 1, 2, ...`` with nothing missing.
- ``"fail-w{W}-s{S}"``: the same, but the env on worker ``W`` raises ``RuntimeError`` at its
  step ``S`` (again after every restart).
- ``"stall-w{W}-s{S}"``: the same, but the env on worker ``W`` sleeps :data:`STALL_S` at its
  step ``S``.
- ``"where"``: observation ``[mark, parent]``: the value of the environment variable
  :data:`MARK` in the worker (-1 unset) and the pid of the worker's parent process.
"""

from __future__ import annotations

import os
import re
import time

import gymnasium
import numpy as np
import torch
from torch import nn
from torchrl.envs import Compose, DoubleToFloat, RewardSum, TransformedEnv
from torchrl.envs.libs.gym import GymWrapper

from actorq.actors.pool import worker_index
from actorq.envs import EnvSuite, register_suite, suites

EPISODE = 50
STALL_S = 4.0
MARK = "ACTORQ_TEST_MARK"


class Counting(gymnasium.Env):
    """Observation ``[worker, t]``; reward is the action; truncated every ``EPISODE`` steps."""

    def __init__(self, fail_worker: int | None = None, fail_step: int | None = None, stall: bool = False):
        self.observation_space = gymnasium.spaces.Box(-1e9, 1e9, shape=(2,), dtype=np.float64)
        self.action_space = gymnasium.spaces.Box(-10.0, 10.0, shape=(1,), dtype=np.float32)
        self.fail_worker, self.fail_step, self.stall = fail_worker, fail_step, stall
        self.t = 0
        self.episode_t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode_t = 0
        return self._observation(), {}

    def step(self, action):
        if self.t == self.fail_step and worker_index() == self.fail_worker:
            if self.stall:
                time.sleep(STALL_S)
            else:
                raise RuntimeError(f"injected fault at step {self.t}")
        self.t += 1
        self.episode_t += 1
        return self._observation(), float(action[0]), False, self.episode_t >= EPISODE, {}

    def _observation(self):
        worker = worker_index()
        return np.array([-1.0 if worker is None else float(worker), float(self.t)])


class Where(Counting):
    def _observation(self):
        return np.array([float(os.environ.get(MARK, "-1")), float(os.getppid())])


class FaultSuite(EnvSuite):
    name = "faults"

    def names(self):
        return ["count", "fail-w0-s0"]

    def knows(self, env_name):
        return env_name in ("count", "where") or re.fullmatch(r"(fail|stall)-w\d+-s\d+", env_name) is not None

    def make(self, env_name, seed):
        match = re.fullmatch(r"(fail|stall)-w(\d+)-s(\d+)", env_name)
        if match:
            raw = Counting(int(match.group(2)), int(match.group(3)), stall=match.group(1) == "stall")
        else:
            raw = Where() if env_name == "where" else Counting()
        env = TransformedEnv(GymWrapper(raw), Compose(DoubleToFloat(), RewardSum()))
        if seed is not None:
            env.set_seed(seed)
        return env


if FaultSuite.name not in suites():  # workers import this module when they unpickle the policy
    register_suite(FaultSuite)


class ConstantAction(nn.Module):
    """A policy whose action is its one parameter, whatever the observation: the batches show
    which weights a worker runs."""

    def __init__(self, value: float = 0.0):
        super().__init__()
        self.value = nn.Parameter(torch.tensor([value]))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.value.expand(*observation.shape[:-1], 1)
