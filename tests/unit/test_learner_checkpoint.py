"""What the learner adds to a checkpoint: counters, update debt, time split and this
process's random states; loading it puts them back (the rest is Lightning's)."""

import random

import numpy as np
import torch

from actorq.algos.base import Exploration
from actorq.algos.dqn import DQN
from tests.helpers import DISCRETE


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
