"""Learning runs: D4PG solves cartpole-balance and SAC solves Pendulum on a CPU budget.

Reference points (5 episodes each): a uniformly random policy scores about 300 on
cartpole-balance (an all-zero action about 750) and about -1200 on Pendulum-v1. Each test takes
about 2 minutes on 2 idle CPU cores, and several times that on a loaded machine.
"""

import pytest

from actorq.train import train

pytestmark = pytest.mark.slow


def test_d4pg_balances_the_cartpole_within_70k_frames(make_cfg):
    """Reaches 800 within 70k frames, not the experiment's 100k, and stops there
    (``eval.stop_at_return``: the frames after it were most of a minute of CI). Two 100k runs
    (seeds 0 and 1) were at 993 and 995 at 60k frames and stayed above 990 to the end (an
    earlier run was at 998 at 50k); seed 0, this test's, was at 542 at 40k and 816 at 50k, so
    the budget keeps a margin of two evaluations."""
    cfg = make_cfg(
        "+experiment=d4pg_cartpole",
        "algo.actor_hidden=[64,64]",
        "algo.critic_hidden=[128,128]",
        "eval.episodes=3",
        "callbacks=no_checkpoint",
        "actors.total_frames=70000",
        "eval.stop_at_return=800",
    )
    summary, _ = train(cfg)
    assert summary["frames"] <= 70_000 + cfg.actors.frames_per_batch
    assert summary["final_return"] >= 800, summary["eval_history"]


def test_sac_swings_up_the_pendulum_within_8k_frames(make_cfg):
    """Reaches -200 within 8k frames and stops there (``eval.stop_at_return``). Pendulum
    evaluations swing by 100+ between neighbouring evaluations of one run, and now and then
    by far more (seed 4 below: -226 at 4k, -861 at 6k, -127 at 8k), so the bar is on reaching
    it, not on the last evaluation.

    64x64 networks, not the experiment's 256x256 (half the time). Seeds 0-5, evaluations at
    2k/4k/6k/8k frames: -1575/-154/-192/-431, -1660/-201/-95/-105, -1530/-102/-102/-152,
    -1486/-125/-163/-191, -1320/-226/-861/-127, -1445/-501/-135/-130: -200 or better by 4k in
    three, by 6k in two, at 8k in one. Seed 0, this test's, ended at -96 on an earlier day
    and at -431 on another (the actors' and the learner's timing decide which weights collect
    which batch), which failed a bar on the last evaluation alone."""
    cfg = make_cfg("+experiment=sac_pendulum", "actors.total_frames=8000", "callbacks=no_checkpoint",
                   "algo.actor_hidden=[64,64]", "algo.critic_hidden=[64,64]", "eval.stop_at_return=-200")
    summary, _ = train(cfg)
    assert summary["frames"] <= 8000 + cfg.actors.frames_per_batch
    assert summary["best_return"] >= -200, summary["eval_history"]
