"""What the learner adds to a checkpoint: counters, update debt, time split and this
process's random states; loading it puts them back (the rest is Lightning's), and an
off-policy learner whose replay came back empty waits for it to refill."""

import random

import numpy as np
import pytest
import torch

from actorq.algos.base import Exploration
from actorq.algos.dqn import DQN
from actorq.data.replay.uniform import UniformReplay
from tests.helpers import DISCRETE, attach_trainer, random_sample


def draws() -> tuple:
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


def test_a_loaded_learner_continues_its_counters_and_random_streams(tmp_path):
    saved = DQN(DISCRETE, Exploration(0.1), hidden=(8,))
    saved.frames, saved.learner_steps, saved._update_debt, saved.time_learn = 1200, 550, 0.5, 3.0
    saved.wall_clock_before = 7.0  # seconds of an earlier resume; this process has not fit yet
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    checkpoint = {}
    saved.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, tmp_path / "learner.pt")
    expected = draws()

    torch.manual_seed(2), np.random.seed(2), random.seed(2)
    loaded = DQN(DISCRETE, Exploration(0.1), hidden=(8,))
    loaded.on_load_checkpoint(torch.load(tmp_path / "learner.pt", weights_only=True))
    assert (loaded.frames, loaded.learner_steps, loaded._update_debt, loaded.time_learn) == (1200, 550, 0.5, 3.0)
    assert loaded.wall_clock_before == 7.0  # summary.json's wall clock counts both runs
    assert draws() == expected


@pytest.mark.parametrize("kept", [False, True], ids=["replay-not-kept", "replay-kept"])
def test_a_resumed_learner_waits_for_a_replay_that_came_back_empty_to_refill(tmp_path, kept):
    """``learning_starts=64``: a run checkpointed at 200 frames resumes. A replay whose contents
    the checkpoint did not keep (``replay.checkpoint=false``; a replay of frames never keeps
    them) comes back empty, and the learner updates again only once it has stored 64
    transitions, not on the few of its first batches; a kept replay is learned from at once."""
    def learner_on(replay: UniformReplay) -> DQN:
        learner = DQN(DISCRETE, Exploration(0.1), hidden=(8,), batch_size=8, learning_starts=64, update_to_data=1.0)
        attach_trainer(learner)
        learner.experience.sampling = replay
        return learner

    def feed(learner: DQN, frames: int = 8) -> None:  # as training_step does with a batch of the actors'
        learner.experience.sampling.extend(random_sample(DISCRETE, size=frames).batch)
        learner.frames += frames
        learner.learn(None, new_frames=frames)

    replay = UniformReplay(1000)
    replay.save_contents = kept
    first = learner_on(replay)
    for _ in range(25):
        feed(first)
    assert first.frames == 200 and first.learner_steps == 200 - 64 + 8  # from the batch that reached 64 on
    checkpoint = {}
    first.on_save_checkpoint(checkpoint)
    torch.save({"learner": checkpoint, "replay": replay.state_dict()}, tmp_path / "run.ckpt")

    saved = torch.load(tmp_path / "run.ckpt", weights_only=True)
    resumed_replay = UniformReplay(1000)
    resumed_replay.save_contents = kept
    resumed_replay.load_state_dict(saved["replay"])
    resumed = learner_on(resumed_replay)
    resumed.on_load_checkpoint(saved["learner"])
    assert len(resumed_replay) == (200 if kept else 0) and resumed.learner_steps == 144
    for _ in range(7):
        feed(resumed)
        assert len(resumed_replay) >= resumed.batch_size  # a batch could be drawn...
    assert resumed.learner_steps == (144 + 56 if kept else 144)  # ...but an empty replay refills first
    feed(resumed)
    assert len(resumed_replay) == (264 if kept else 64) and resumed.learner_steps == (144 + 64 if kept else 144 + 8)
