"""``eval.stop_at_return``: the first evaluation that reaches the bar ends the run there, as
its budget would (actors stopped, last checkpoint and summary written), and a resume with
``eval.stop_at_return=null`` trains on to the budget.

The bar is 0, which any CartPole episode reaches: the run stops at its first evaluation
whatever it learned, so the test is about the stop, not the learning (a few seconds a run).
"""

import multiprocessing

import pytest

from actorq.run.checks import composed
from actorq.train import train
from tests.conftest import TINY

TOTAL = 1200
OVERRIDES = ("+experiment=dqn_cartpole", *TINY, f"actors.total_frames={TOTAL}", "eval.every_frames=400",
             "~callbacks.carbon", "trainer.enable_progress_bar=false")


@pytest.fixture(scope="module")
def stopped_then_resumed(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("stop_at_return")
    summaries = []
    for extra in (["eval.stop_at_return=0"], ["eval.stop_at_return=null", "ckpt_path=last"]):
        summaries.append(train(composed([*OVERRIDES, f"run_dir={run_dir}", *extra]))[0])
        assert multiprocessing.active_children() == []  # the actors stopped with the run
    return run_dir, summaries


def test_the_run_stops_at_the_first_evaluation_that_reaches_the_bar(stopped_then_resumed):
    run_dir, (stopped, _) = stopped_then_resumed
    [(frames, mean)] = stopped["eval_history"]  # no second evaluation at the end: it is this one
    assert mean >= 0 and frames == stopped["stopped_at_frames"] == stopped["frames"] < TOTAL
    assert stopped["status"] == "completed" and stopped["stop_at_return"] == 0
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()


def test_a_resume_without_the_bar_trains_on_to_the_budget(stopped_then_resumed):
    _, (stopped, resumed) = stopped_then_resumed
    assert resumed["frames"] == TOTAL and resumed["stopped_at_frames"] is None
    assert resumed["eval_history"][0] == stopped["eval_history"][0]
    assert [frames for frames, _ in resumed["eval_history"]] == [400, 800, TOTAL]
