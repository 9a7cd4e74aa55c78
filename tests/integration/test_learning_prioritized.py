"""Learning run: DQN with prioritized replay still solves CartPole (slow: about two minutes).

Measured with seed 0: the greedy policy scores 500 (the maximum) from 10k frames on.
"""

import pytest

from actorq.replay.prioritized import PrioritizedReplay
from actorq.train import train

pytestmark = pytest.mark.slow


def test_dqn_with_prioritized_replay_solves_cartpole(make_cfg):
    cfg = make_cfg("+experiment=dqn_cartpole", "replay.prioritized=true", "callbacks=none")
    summary, objects = train(cfg)
    replay = objects["learner"].replay
    assert isinstance(replay, PrioritizedReplay) and replay.beta == 1.0
    assert summary["frames"] <= 50_000 + 256
    assert summary["best_return"] >= 475, summary["eval_history"]
    assert summary["final_return"] >= 475, summary["eval_history"]
