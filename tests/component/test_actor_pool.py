"""Real collector worker processes: weights pushed by the learner change what they do."""

import time

import pytest
import torch

from actorq.actors.base import ActorSpec
from actorq.actors.policy import ExplorationPolicy, actor_policy
from actorq.actors.pool import ActorPool
from actorq.algos.base import Exploration
from actorq.algos.ddpg import DDPG
from actorq.envs import EnvSpec, make_env
from actorq.algos.networks import DeterministicActor
from actorq.quant import QuantSpec, quantize


@pytest.fixture
def pendulum_policy():
    spec = EnvSpec.from_env(make_env("Pendulum-v1"))
    return ExplorationPolicy(DeterministicActor(spec, (16,)), spec, 0.0, records=("worker",))


@pytest.mark.parametrize("quant", [QuantSpec(bits=32), QuantSpec(bits=8, mode="static")], ids=["fp32", "int8"])
def test_actors_see_learner_weights_only_when_pushed(quant):
    """The actors run their own copy (fp32 too): an optimizer-like in-place change of the
    learner's weights reaches no worker until a payload is loaded and pushed."""
    torch.manual_seed(0)  # an initial policy that does not itself sit at the upper bound for a whole batch
    spec = EnvSpec.from_env(make_env("Pendulum-v1"))
    learner = DDPG(spec, Exploration(0.0), actor_hidden=(16,))
    observations = torch.rand(256, 3) * 2 - 1
    actors_copy = actor_policy(learner, quant, observations)
    pool = ActorPool(ActorSpec("Pendulum-v1", num_workers=2, frames_per_batch=50, total_frames=1200,
                     envs_per_worker=2, seed=3), actors_copy)
    try:
        unpushed, pushed, changed_at, pushed_at = [], [], None, None
        for index, batch in enumerate(pool):
            assert batch.shape == (2, 25)  # two envs per worker, time last
            if index == 2:
                with torch.no_grad():  # saturates the learner's actions at the upper bound
                    learner.behaviour_network.trunk[-1].bias.fill_(10.0)
                changed_at = index
            elif index == 10:
                actors_copy.network.load_payload(quantize(learner.behaviour_network, quant, observations))
                pool.push(actors_copy)
                pushed_at = index
            elif changed_at is not None and pushed_at is None:
                unpushed.append(batch["action"])
            elif pushed_at is not None and index > pushed_at + 8:  # batches in flight (more on a busy machine) are old
                pushed.append(batch["action"])
    finally:
        pool.shutdown()
    assert len(unpushed) >= 6 and all((actions < 1.9).any() for actions in unpushed)
    assert len(pushed) >= 4 and all(torch.allclose(a, torch.full_like(a, 2.0), atol=1e-2) for a in pushed)


def test_frame_budget_and_length(pendulum_policy):
    """Each asynchronous batch is one worker's, and records which (the learner keeps each
    env's running return by it)."""
    pool = ActorPool(ActorSpec("Pendulum-v1", num_workers=2, frames_per_batch=40, total_frames=400), pendulum_policy)
    try:
        batches = list(pool)
    finally:
        pool.shutdown()
    assert sum(batch.numel() for batch in batches) == 400 and len(pool) == 10
    assert all(len(set(batch["worker"].tolist())) == 1 for batch in batches)
    assert {int(batch["worker"][0]) for batch in batches} <= {0, 1}


def test_old_env_path_on_request(pendulum_policy):
    """``lean_envs=False`` keeps the TorchRL transform stack (a SerialEnv of make_env envs)."""
    pool = ActorPool(ActorSpec("Pendulum-v1", num_workers=1, frames_per_batch=40, total_frames=120,
                     envs_per_worker=2, lean_envs=False), pendulum_policy)
    try:
        batches = list(pool)
    finally:
        pool.shutdown()
    assert [tuple(b.shape) for b in batches] == [(2, 20)] * 3
    assert all(b["worker"].eq(0).all() for b in batches)  # TorchRL's rollout records it too
    assert all(b["next", "episode_reward"].dtype == torch.float32 for b in batches)


def test_a_suite_without_raw_envs_falls_back_to_make_env():
    from torchrl.envs import SerialEnv

    from actorq.actors.pool import make_worker_env
    from actorq.envs import EnvSuite, register_suite, unregister_suite
    from actorq.envs.batched import LeanBatchedEnv

    @register_suite
    class Mine(EnvSuite):
        name = "mine"

        def names(self):
            return ["pendulum"]

        def make(self, env_name, seed):
            return make_env("Pendulum-v1", seed=seed, library="gymnasium")

    try:
        one = make_worker_env("pendulum", 1, seed=0, library="mine")
        several = make_worker_env("pendulum", 3, seed=0, library="mine")
    finally:
        unregister_suite("mine")
    assert not isinstance(one, LeanBatchedEnv) and isinstance(several, SerialEnv)
    assert isinstance(make_worker_env("Pendulum-v1", 3, seed=0, library="gymnasium"), LeanBatchedEnv)


def test_a_worker_collects_ahead_while_the_learner_holds_a_batch(pendulum_policy):
    """The pool takes each batch as it arrives, so a worker is not held up by a learner still
    busy with an earlier batch: while the first batch is held, the worker hands over its
    second and collects a third (it used to wait after the second for the learner to ask)."""
    frames_per_batch = 40
    pool = ActorPool(ActorSpec("Pendulum-v1", num_workers=1, frames_per_batch=frames_per_batch, total_frames=400),
                     pendulum_policy)
    try:
        batches = iter(pool)
        next(batches)  # held: the learner is busy with it
        deadline = time.monotonic() + 30.0
        while pool.collected_frames < 3 * frames_per_batch and time.monotonic() < deadline:
            time.sleep(0.05)
        collected_ahead = pool.collected_frames
        frames = frames_per_batch + sum(batch.numel() for batch in batches)
    finally:
        pool.shutdown()
    assert collected_ahead >= 3 * frames_per_batch
    assert frames == 400 and pool.dropped_frames == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_lock_step_rounds_are_collected_with_the_policy_pushed_after_the_last_round(workers):
    """Each round is every worker's batch, merged ``[envs, T]``, and every step of it carries
    the version pushed after the round before (lag 0); asynchronous collection would already
    hold the next batch, collected with the old version."""
    spec = EnvSpec.from_env(make_env("Pendulum-v1"))
    policy = ExplorationPolicy(DeterministicActor(spec, (16,)), spec, 0.0, records=("policy_version", "worker"))
    pool = ActorPool(ActorSpec("Pendulum-v1", num_workers=workers, frames_per_batch=30, total_frames=600,
                     envs_per_worker=3, seed=1, collection="lockstep"), policy)
    versions = []
    try:
        assert len(pool) == 600 // (30 * workers)
        for version, batch in enumerate(pool):
            assert batch.shape == (3 * workers, 10)
            assert batch["worker"][:, 0].tolist() == [worker for worker in range(workers) for _ in range(3)]
            versions.append(set(batch["policy_version"].flatten().tolist()))
            policy.policy_version.fill_(version + 1)
            pool.push(policy)
    finally:
        pool.shutdown()
    assert versions == [{version} for version in range(600 // (30 * workers))]
    assert pool.frames == pool.collected_frames == 600 and pool.dropped_frames == 0
