"""Learning run: DQN with prioritized replay still solves CartPole (slow: two to four minutes).

Measured with the ``dqn_cartpole`` config as it is (soft target updates, learning rate
decaying to 0; 50k frames, eval every 5k frames, 2-core CPU shared with other jobs): the
last evaluation was 500 on seeds 0, 1 and 2, each solved on 3 to 7 evaluations. As in
``test_learning.py``, the bar is on solving within the budget (on two evaluations, so not
by luck): DQN with the same config ended one of 17 runs at 134 after solving CartPole.
"""

import pytest

from actorq.replay.prioritized import PrioritizedReplay
from actorq.train import train
from tests.helpers import solved_evaluations

pytestmark = pytest.mark.slow


def test_dqn_with_prioritized_replay_solves_cartpole(make_cfg):
    cfg = make_cfg("+experiment=dqn_cartpole", "replay.prioritized=true", "callbacks=none")
    summary, objects = train(cfg)
    replay = objects["learner"].replay
    assert isinstance(replay, PrioritizedReplay) and replay.beta == 1.0
    assert replay.priorities.max_priority > 1.0  # |TD errors| were fed back
    assert summary["frames"] <= 50_000 + 256
    assert len(solved_evaluations(summary)) >= 2, summary["eval_history"]
