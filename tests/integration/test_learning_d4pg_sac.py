"""Learning runs: D4PG solves cartpole-balance and SAC solves Pendulum on a CPU budget.

Reference points (5 episodes each): a uniformly random policy scores about 300 on
cartpole-balance (an all-zero action about 750) and about -1200 on Pendulum-v1. Each test takes
about 2 minutes on 2 idle CPU cores, and several times that on a loaded machine.
"""

import pytest

from actorq.train import train

pytestmark = pytest.mark.slow


def test_d4pg_balances_the_cartpole_within_70k_frames(make_cfg):
    """70k frames, not the experiment's 100k (a minute and a half less of CI). Two 100k runs
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
    )
    summary, _ = train(cfg)
    assert summary["frames"] <= 70_000 + cfg.actors.frames_per_batch
    assert summary["final_return"] >= 800, summary["eval_history"]


def test_sac_swings_up_the_pendulum_within_8k_frames(make_cfg):
    """Pendulum evaluations swing by 100+ between neighbouring evaluations of one run (a clean
    run measured -126, -132, -274 at 4k, 6k, 8k frames), so the bar is the best evaluation,
    and the last one must still be far above a random policy's -1200.

    64x64 networks, not the experiment's 256x256: half the time (74-77 s vs ~150 s here), and
    seeds 0, 1, 2 had best -96, -95, -103 and last -96, -104, -153 (every run under -200 by
    the 4k or 6k evaluation)."""
    cfg = make_cfg("+experiment=sac_pendulum", "actors.total_frames=8000", "callbacks=no_checkpoint",
                   "algo.actor_hidden=[64,64]", "algo.critic_hidden=[64,64]")
    summary, _ = train(cfg)
    assert summary["best_return"] >= -200, summary["eval_history"]
    assert summary["final_return"] >= -400, summary["eval_history"]
