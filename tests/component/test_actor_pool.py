"""Real collector worker processes: weights pushed by the learner change what they do."""

import copy

import pytest
import torch

from actorq.actors.policy import ExplorationPolicy
from actorq.actors.pool import ActorPool
from actorq.envs import EnvSpec, make_env
from actorq.networks import DeterministicActor


@pytest.fixture
def pendulum_policy():
    spec = EnvSpec.from_env(make_env("Pendulum-v1"))
    return ExplorationPolicy(DeterministicActor(spec, (16,)), spec, 0.0)


def test_push_changes_every_workers_actions(pendulum_policy):
    learner = copy.deepcopy(pendulum_policy)
    pool = ActorPool("Pendulum-v1", pendulum_policy, num_workers=2, frames_per_batch=50,
                     total_frames=1200, envs_per_worker=2, seed=3)
    try:
        before, after, pushed_at = [], [], None
        for index, batch in enumerate(pool):
            assert batch.shape == (2, 25)  # two envs per worker, time last
            if index == 3:
                with torch.no_grad():
                    learner.network.trunk[-1].bias.fill_(10.0)  # saturates to the upper bound
                pool.push(learner)
                pushed_at = index
            elif pushed_at is None:
                before.append(batch["action"])
            elif index > pushed_at + 4:  # batches in flight at push time are old
                after.append(batch["action"])
    finally:
        pool.shutdown()
    assert all((actions < 1.9).any() for actions in before)
    assert len(after) >= 4 and all(torch.allclose(a, torch.full_like(a, 2.0), atol=1e-3) for a in after)


def test_frame_budget_and_length(pendulum_policy):
    pool = ActorPool("Pendulum-v1", pendulum_policy, num_workers=2, frames_per_batch=40, total_frames=400)
    try:
        frames = sum(batch.numel() for batch in pool)
    finally:
        pool.shutdown()
    assert frames == 400 and len(pool) == 10


@pytest.mark.parametrize("field", ["num_workers", "frames_per_batch", "total_frames", "envs_per_worker"])
def test_non_positive_sizes_are_rejected(pendulum_policy, field):
    kwargs = {"num_workers": 1, "frames_per_batch": 10, "total_frames": 100, field: 0}
    with pytest.raises(ValueError, match=f"actors.{field} must be positive"):
        ActorPool("Pendulum-v1", pendulum_policy, **kwargs)
