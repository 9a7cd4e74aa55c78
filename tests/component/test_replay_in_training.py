"""Prioritized and shared replay inside a real (tiny) training run."""

from functools import partial

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from actorq.actors import actor_pool
from actorq.algos.base import Exploration
from actorq.util.clock import FrameClock
from actorq.envs import make_env
from actorq.util.errors import ConfigError
from actorq.experience import Experience, ExperienceSpec, ReplayFeed
from actorq.data.replay import transition_template
from actorq.data.replay.prioritized import PrioritizedReplay
from actorq.data.replay.shared import SharedReplay
from actorq.train import train
from tests.conftest import TINY

FAST = (*TINY, "+experiment=dqn_cartpole", "algo.hidden=[32,32]", "callbacks=no_checkpoint")
TOTAL_FRAMES = 600  # TINY's budget


def leaf_priorities(replay) -> np.ndarray:
    return replay.priorities.tree.values(np.arange(len(replay)))


def n_step_discounts(gamma: float, n_step: int) -> set[float]:
    """Bootstrap discounts an n-step transition can carry (0 after termination)."""
    return {0.0} | {round(gamma**k, 5) for k in range(1, n_step + 1)}


@pytest.mark.parametrize("bits", [32, 8])
def test_prioritized_replay_is_sampled_by_priority_and_fed_back(make_cfg, bits):
    """With int8 actors too: calibrating each push must not draw from the learner's sampler."""
    summary, objects = train(make_cfg(*FAST, "replay.prioritized=true", f"quant.bits={bits}",
                                      "callbacks.push.every_n_steps=20"))
    assert objects["callbacks"]["push"].pushes >= 3
    learner, replay = objects["learner"], objects["experience"].replay
    assert isinstance(replay, PrioritizedReplay)
    assert summary["frames"] == learner.frames == len(replay) == TOTAL_FRAMES
    assert learner.learner_steps > 0
    # |TD errors| came back: priorities moved away from the uniform initial value.
    assert replay.priorities.max_priority > 1.0
    assert len(np.unique(leaf_priorities(replay))) > 100
    # beta is annealed once per update, over the run's planned updates, and ends at 1.
    assert replay.priorities.beta_annealing_steps == learner.planned_updates(TOTAL_FRAMES)
    assert replay.priorities.steps == learner.learner_steps
    assert replay.beta == 1.0


def test_actors_write_into_the_shared_replay_without_losing_transitions(make_cfg, tmp_path):
    summary, objects = train(make_cfg(*FAST, "replay.shared=true", "replay.prioritized=true",
                                      "actors.num_workers=2", "quant.bits=8"))
    learner, replay = objects["learner"], objects["experience"].replay
    assert isinstance(replay, SharedReplay) and objects["experience"].writer.in_workers
    # Every frame the workers collected is a complete transition in the buffer; the
    # learner counted every batch it was told about (workers may finish one more each).
    written = objects["experience"].writer.write_count
    assert replay.reserved == len(replay) == written
    assert TOTAL_FRAMES <= learner.frames <= written
    assert summary["frames"] == learner.frames and learner.frames % 100 == 0
    # The workers ran the learner's n-step transform before writing.
    batch = replay.sample(256).batch
    discounts = set(batch["discount"].double().round(decimals=5).tolist())
    assert discounts <= n_step_discounts(learner.gamma, learner.n_step)
    assert round(learner.gamma**learner.n_step, 5) in discounts
    assert (batch["observation"] != 0).any(dim=1).all()  # no never-written rows
    # Updates happened and their priorities reached the shared buffer's tree.
    assert learner.learner_steps > 0
    assert replay.priorities.max_priority > 1.0
    assert len(np.unique(leaf_priorities(replay))) > 100
    # Evaluation, int8 weight pushes (calibrated on the shared buffer) and the collection
    # metrics still work.
    assert summary["final_return"] is not None and objects["callbacks"]["push"].pushes > 0
    assert summary["final_return_quant"] is not None
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"collect/frames", "collect/episode_return", "train/loss_value"} <= tags
    assert max(e.value for e in events.Scalars("collect/frames")) == learner.frames
    # Two workers writing themselves: no frame dropped, no restart.
    assert {e.value for e in events.Scalars("collect/dropped_frames")} == {0.0}
    assert {e.value for e in events.Scalars("collect/actor_restarts")} == {0.0}


def test_shared_replay_alone_samples_uniformly(make_cfg):
    summary, objects = train(make_cfg(*FAST, "replay.shared=true"))
    replay = objects["experience"].replay
    assert isinstance(replay, SharedReplay) and replay.priorities.alpha == 0.0
    assert len(np.unique(leaf_priorities(replay))) == 1  # every slot equally likely
    assert torch.equal(replay.sample(64).weights, torch.ones(64))
    assert summary["learner_steps"] > 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["replay.prioritized=yes"], "replay.prioritized must be true or false, got 'yes'"),
        (["replay.prioritized=true", "replay.fanout=6"], "fanout must be a power of two"),
        (["replay.shared=true", "replay.prioritized=true", "replay.beta=1.5"], "beta must be in [0, 1], got 1.5"),
        (["replay.prioritized=true", "replay.capacity=0"], "capacity must be positive"),
    ],
)
def test_bad_replay_values_are_config_errors(make_cfg, overrides, message):
    with pytest.raises(ConfigError) as error:
        train(make_cfg(*FAST, *overrides))
    assert message in str(error.value)


def test_checkpoint_restores_the_sampling_state():
    """What the experience pipeline saves in a checkpoint comes back when it is loaded."""

    def experience_with(replay):
        experience = Experience(ExperienceSpec("CartPole-v1"), make_actors=partial(actor_pool, total_frames=1000),
                                actor_policy=None, clock=FrameClock(Exploration(0.1)),
                                feed=ReplayFeed(None, planned_updates=10))
        experience.replay = replay
        return experience

    replay = PrioritizedReplay(capacity=100, beta_annealing_steps=10)
    replay.extend(transition_template(make_env("CartPole-v1")).expand(50).clone())
    sample = replay.sample(8)
    replay.update_priorities(sample.indices, torch.full((8,), 5.0))
    state = experience_with(replay).state_dict()

    restored = PrioritizedReplay(capacity=100, beta_annealing_steps=10)
    experience_with(restored).load_state_dict(state)
    assert restored.priorities.steps == 1 and restored.beta == replay.beta
    assert restored.priorities.max_priority == replay.priorities.max_priority > 5.0
    assert restored.priorities.rng.bit_generator.state == replay.priorities.rng.bit_generator.state
