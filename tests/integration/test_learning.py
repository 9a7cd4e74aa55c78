"""Learning runs with the reference bars (slow: minutes each, still run by ``make test``).

Each run happens once per session and is shared by the tests that read it.
"""

import pytest
from hydra import compose, initialize_config_module

from actorq.train import train
from tests.helpers import solved_evaluations

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def learning_run(tmp_path_factory):
    summaries = {}

    def run(experiment: str, *overrides: str) -> dict:
        key = (experiment, overrides)
        if key not in summaries:
            run_dir = tmp_path_factory.mktemp(experiment)
            with initialize_config_module("actorq.conf", version_base="1.3"):
                cfg = compose("config", overrides=[f"+experiment={experiment}", f"run_dir={run_dir}",
                                                   "callbacks=no_checkpoint", *overrides])
            summaries[key] = train(cfg)[0]
        return summaries[key]

    return run


RANDOM_CARTPOLE = 22.0  # mean return of uniformly random actions


def test_dqn_solves_cartpole_within_50k_frames(learning_run):
    """Solved (eval mean >= 475) within the budget, on two evaluations, so not by luck.

    The bar is on reaching it, not on the last evaluation: DQN can unlearn CartPole after
    solving it. Measured with the learning rate decaying to 0, 17 runs (fp32 and int8
    actors, uniform and prioritized replay): 16 ended at 488 or 500, one solved at 30k and
    ended at 134 (500, 500, 170, 138, 134 from 30k). Every run solved on at least two
    evaluations.
    """
    summary = learning_run("dqn_cartpole")
    assert summary["frames"] <= 50_000 + 256
    assert len(solved_evaluations(summary)) >= 2, summary["eval_history"]


@pytest.mark.parametrize(("experiment", "bar", "max_frames"),
                         [("td3_pendulum", -200.0, 20_000), ("ddpg_pendulum", -250.0, 20_000)])
def test_reaches_the_reference_return(learning_run, experiment, bar, max_frames):
    summary = learning_run(experiment)
    assert summary["frames"] <= max_frames + 256
    assert summary["final_return"] >= bar, summary["eval_history"]


def test_int8_actors_learn_as_well_as_fp32_on_cartpole(learning_run):
    """With int8 actors the learner solves CartPole as the fp32 run does (one seed; the
    3-seed comparison of final returns is ``python -m actorq.bench learning``), and the int8
    policy the actors run is a working CartPole policy.

    The int8 policy's own greedy evaluations are held to far above random, not to the solved
    bar: CartPole's two Q-values are nearly tied in many states and int8 rounding flips some
    greedy actions. Measured best greedy evaluation of the int8 policy: 500 in 12 runs, 442
    in one; its last one 202 to 413 in 5 of 13 runs while the learner's policy scored 500.
    """
    fp32 = learning_run("dqn_cartpole")
    int8 = learning_run("dqn_cartpole", "quant.bits=8")
    assert int8["actor_precision"].startswith("int8")
    assert len(solved_evaluations(int8)) >= 2, int8["eval_history"]
    assert int8["best_return"] >= fp32["best_return"] - 0.05 * abs(fp32["best_return"])
    best_int8_policy = max(mean for _, mean in int8["eval_history_quant"])
    assert best_int8_policy >= 10 * RANDOM_CARTPOLE, int8["eval_history_quant"]


def test_int8_actors_meet_the_fp32_bar_on_pendulum(learning_run):
    """One Pendulum run's final return varies by about 25% between fp32 seeds alone
    (-174, -118, -99 measured), so a single-seed 5% comparison would test luck; the
    within-5% comparison over 3 seeds is ``python -m actorq.bench learning --seeds 0 1 2``.
    Here int8 actors must reach the bar fp32 reaches, and so must the int8 policy itself."""
    int8 = learning_run("td3_pendulum", "quant.bits=8")
    assert int8["actor_precision"].startswith("int8")
    assert int8["final_return"] >= -200.0, int8["eval_history"]
    assert int8["final_return_quant"] >= -200.0, int8["eval_history_quant"]
