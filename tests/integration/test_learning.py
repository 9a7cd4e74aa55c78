"""Learning runs with the reference bars (slow: minutes each, still run by ``make test``).

Each run happens once per session and is shared by the tests that read it.
"""

import pytest
from hydra import compose, initialize_config_module

from actorq.train import train

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
                                                   "callbacks=none", *overrides])
            summaries[key] = train(cfg)[0]
        return summaries[key]

    return run


@pytest.mark.parametrize(
    ("experiment", "bar", "max_frames"),
    [("dqn_cartpole", 475.0, 50_000), ("td3_pendulum", -200.0, 20_000), ("ddpg_pendulum", -250.0, 20_000)],
)
def test_reaches_the_reference_return(learning_run, experiment, bar, max_frames):
    summary = learning_run(experiment)
    assert summary["frames"] <= max_frames + 256
    assert summary["final_return"] >= bar, summary["eval_history"]


def test_int8_actors_learn_as_well_as_fp32_on_cartpole(learning_run):
    """The learner trained on int8 actors' experience ends within 5% of the fp32 run, and
    the int8 policy itself solves CartPole during the run. Its own last evaluation is not
    held to the bar: CartPole's two Q-values are nearly tied in many states, so int8
    rounding flips some greedy actions, and in 3 of 10 measured runs the int8 policy ended
    at 202 to 413 while the fp32 policy it was quantized from scored 500."""
    fp32 = learning_run("dqn_cartpole")["final_return"]
    int8 = learning_run("dqn_cartpole", "quant.bits=8")
    assert int8["actor_precision"].startswith("int8")
    assert int8["final_return"] >= fp32 - 0.05 * abs(fp32), (fp32, int8["eval_history"])
    assert max(mean for _, mean in int8["eval_history_quant"]) >= 475.0, int8["eval_history_quant"]


def test_int8_actors_meet_the_fp32_bar_on_pendulum(learning_run):
    """One Pendulum run's final return varies by about 25% between fp32 seeds alone
    (-174, -118, -99 measured), so a single-seed 5% comparison would test luck; the
    within-5% comparison over 3 seeds is ``python -m actorq.bench learning --seeds 0 1 2``.
    Here int8 actors must reach the bar fp32 reaches, and so must the int8 policy itself."""
    int8 = learning_run("td3_pendulum", "quant.bits=8")
    assert int8["actor_precision"].startswith("int8")
    assert int8["final_return"] >= -200.0, int8["eval_history"]
    assert int8["final_return_quant"] >= -200.0, int8["eval_history_quant"]
