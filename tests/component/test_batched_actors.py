"""Real actor workers stepping lean batched envs: batch layout, transitions and returns."""

from __future__ import annotations

import pytest
import torch

from actorq.actors.base import ActorSpec
from actorq.actors.policy import ExplorationPolicy
from actorq.actors.pool import ActorPool, make_worker_env
from actorq.envs import EnvSpec, make_env
from actorq.envs.batched import LeanBatchedEnv
from actorq.algos.networks import DeterministicActor, QNetwork

ENVS_PER_WORKER = 4
FRAMES_PER_BATCH = 200  # 50 steps of 4 envs

pytestmark = pytest.mark.timeout(300)


def _policy(name: str) -> ExplorationPolicy:
    spec = EnvSpec.from_env(make_env(name))
    torch.manual_seed(0)
    network = QNetwork(spec, (16,)) if spec.discrete else DeterministicActor(spec, (16,))
    return ExplorationPolicy(network, spec, noise_scale=0.5)


def _check_batch(batch, carried: dict) -> list[tuple[float, float]]:
    """Checks one worker batch ``[envs, T]``; returns (episode_reward at done, summed rewards)
    for every episode that ended, its start carried over from the worker's earlier batches."""
    assert batch.shape == (ENVS_PER_WORKER, FRAMES_PER_BATCH // ENVS_PER_WORKER)
    reward = batch["next", "reward"].squeeze(-1)
    done = batch["next", "done"].squeeze(-1)
    assert torch.equal(done, batch["next", "terminated"].squeeze(-1) | batch["next", "truncated"].squeeze(-1))
    # RewardSum's bookkeeping, step by step: next return = return + reward
    assert torch.allclose(batch["next", "episode_reward"].squeeze(-1),
                          batch["episode_reward"].squeeze(-1) + reward, atol=1e-5)
    # the transition chain: step t+1 starts where step t ended, unless the episode ended
    same = ~done[:, :-1]
    assert torch.equal(batch["next", "observation"][:, :-1][same], batch["observation"][:, 1:][same])
    assert torch.equal(batch["next", "episode_reward"][:, :-1][same], batch["episode_reward"][:, 1:][same])
    assert (batch["episode_reward"][:, 1:][done[:, :-1]] == 0).all()  # a new episode starts at 0
    ended = []
    for env in range(ENVS_PER_WORKER):
        key = (int(batch["collector", "traj_ids"][env, 0]), env)
        total = carried.pop(key, 0.0) if float(batch["episode_reward"][env, 0]) != 0.0 else 0.0
        for t in range(batch.shape[1]):
            total += float(reward[env, t])
            if done[env, t]:
                ended.append((float(batch["next", "episode_reward"][env, t]), total))
                total = 0.0
        carried[(int(batch["collector", "traj_ids"][env, -1]), env)] = total
    return ended


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1"])
def test_two_workers_of_four_lean_envs(name):
    pool = ActorPool(ActorSpec(name, num_workers=2, envs_per_worker=ENVS_PER_WORKER,
                     frames_per_batch=FRAMES_PER_BATCH, total_frames=FRAMES_PER_BATCH * 14, seed=1), _policy(name))
    carried: dict = {}
    ended = []
    try:
        for batch in pool:
            ended += _check_batch(batch, carried)
    finally:
        pool.shutdown()
    assert len(ended) >= 8
    for logged, summed in ended:
        assert logged == pytest.approx(summed, abs=1e-3)


def test_worker_env_paths():
    lean = make_worker_env("Pendulum-v1", 4, seed=0)
    assert isinstance(lean, LeanBatchedEnv) and lean.batch_size == (4,)
    single = make_worker_env("Pendulum-v1", 1, seed=0)
    assert isinstance(single, LeanBatchedEnv) and single.batch_size == ()
    old = make_worker_env("Pendulum-v1", 4, seed=0, lean=False)
    assert not isinstance(old, LeanBatchedEnv) and old.batch_size == (4,)
