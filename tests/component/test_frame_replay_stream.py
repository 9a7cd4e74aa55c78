"""The frame replay on the stream the real actors write: two worker processes stepping Atari
Breakout through the lean rollout, random frames first, every batch stored as the learner
stores it. Every transition the replay gives back is one the actors recorded, frame for frame,
and none is lost."""

from __future__ import annotations

import collections
import hashlib

import numpy as np
import pytest
import torch

pytest.importorskip("ale_py")

from actorq.actors.base import ActorSpec  # noqa: E402
from actorq.actors.policy import ExplorationPolicy  # noqa: E402
from actorq.actors.pool import ActorPool  # noqa: E402
from actorq.algos.conv import PixelQNetwork  # noqa: E402
from actorq.algos.off_policy import OffPolicyLearner  # noqa: E402
from actorq.data.replay.frames import FrameReplay  # noqa: E402
from actorq.envs import EnvSpec, make_env  # noqa: E402

WORKERS, ENVS_PER_WORKER, FRAMES_PER_BATCH, BATCHES = 2, 2, 64, 10  # 32 steps of 2 envs a worker's batch
RANDOM_FRAMES = 4 * FRAMES_PER_BATCH  # each worker's first batches

pytestmark = pytest.mark.timeout(300)


def key(observation, next_observation, action, reward, done) -> tuple:
    """One transition, its two observations by their bytes' digest."""
    digest = hashlib.sha1(observation.numpy().tobytes() + next_observation.numpy().tobytes()).hexdigest()
    return digest, int(action), float(reward), bool(done)


@pytest.fixture(scope="module", params=["async", "lockstep"])
def collected(request) -> tuple[list, FrameReplay]:
    """The batches two Breakout workers handed over (as the learner receives them: each
    worker's as it comes, or rounds of both), and a frame replay that stored each as it arrived."""
    spec = EnvSpec.from_env(make_env("breakout", library="atari"))
    torch.manual_seed(0)
    network = PixelQNetwork("nature", spec.frame_shape, spec.num_actions)
    policy = ExplorationPolicy(network, spec, noise_scale=0.5, records=OffPolicyLearner.records)  # DQN's actors'
    pool = ActorPool(ActorSpec("breakout", library="atari", num_workers=WORKERS, envs_per_worker=ENVS_PER_WORKER,
                               frames_per_batch=FRAMES_PER_BATCH, total_frames=BATCHES * FRAMES_PER_BATCH,
                               init_random_frames=RANDOM_FRAMES, seed=5, collection=request.param), policy)
    replay = FrameReplay(capacity=WORKERS * ENVS_PER_WORKER * 1000, envs=WORKERS * ENVS_PER_WORKER)
    batches = []
    try:
        for batch in pool:
            batch = batch.clone()
            replay.extend(batch)
            batches.append(batch)
    finally:
        pool.shutdown()
    return batches, replay


def test_random_frames_record_the_worker_that_took_them(collected):
    batches, _ = collected
    random = [batch for batch in batches if (batch["output"] == 0).all()]  # the policy did not act
    assert 0 < len(random) < len(batches)
    assert {int(worker) for batch in random for worker in batch["worker"][:, 0]} == set(range(WORKERS))
    assert all((batch["worker"] == batch["worker"][:, :1]).all() for batch in batches)  # one worker a row


def test_every_transition_the_replay_gives_back_is_one_the_actors_recorded(collected):
    batches, replay = collected
    assert sum(int(batch["next", "done"].sum()) for batch in batches) >= 2  # across episode ends and starts
    recorded = collections.Counter(
        key(step["observation"], step["next", "observation"], step["action"], step["next", "reward"],
            step["next", "done"])
        for batch in batches for row in batch for step in row)
    stored = collections.Counter()
    for env, starts in enumerate(replay.starts()):
        got = replay.transitions(np.full(len(starts), env), starts)
        stored.update(key(*(got[name][i] for name in ("observation", "next_observation", "action", "reward", "done")))
                      for i in range(len(starts)))
    assert not stored - recorded  # no stack mixes two envs' frames, no next observation is another env's
    steps = sum(batch.numel() for batch in batches)
    assert len(replay) == sum(stored.values()) == steps - WORKERS * ENVS_PER_WORKER  # each env's last step waits
    assert replay.stream_breaks == 0 and len(replay._rings) == WORKERS * ENVS_PER_WORKER
    sample = replay.sample(256, generator=np.random.default_rng(0)).batch
    drawn = [key(*(sample[name][i] for name in ("observation", "next_observation", "action", "reward", "done")))
             for i in range(256)]
    assert all(transition in recorded for transition in drawn)
