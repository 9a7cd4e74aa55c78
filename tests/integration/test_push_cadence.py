"""Each learner family declares its push cadence and its random frames: PPO with no
experiment file pushes after every rollout and takes no random action, so the lag its
rollouts record is 0 in lock-step, in pushed versions and in learner steps; the
off-policy algorithms keep a push every 100 learner steps after 1000 random frames."""

from __future__ import annotations

import pytest

from actorq.run.build import check_job
from actorq.train import train
from tests.conftest import TINY_ON_POLICY
from tests.helpers import scalars

QUIET = ("algo.hidden=[16]", "callbacks=no_checkpoint", "~callbacks.carbon", "trainer.enable_progress_bar=false")


def test_ppo_without_an_experiment_pushes_after_every_rollout_and_lags_by_nothing(make_cfg, tmp_path):
    summary, objects = train(make_cfg("algo=ppo", "env=cartpole", *TINY_ON_POLICY, *QUIET))
    rollouts = summary["frames"] // 128
    assert rollouts == 4 and summary["behaviour_correction"]["rollouts"] == rollouts
    assert objects["experience"].actors.spec.init_random_frames == 0
    logged = scalars(tmp_path / "tb")
    assert [value for _, value in logged.get("quant/policy_version", [])] == [1.0, 2.0, 3.0, 4.0]
    for lag in ("collect/policy_lag", "collect/policy_lag_steps"):
        assert [value for _, value in logged[lag]] == [0.0] * rollouts, lag
    assert summary["behaviour_correction"]["policy_lag_steps"] == 0


@pytest.mark.parametrize(("algo", "env"), [("dqn", "cartpole"), ("sac", "pendulum")])
def test_off_policy_runs_push_every_100_learner_steps_after_1000_random_frames(make_cfg, algo, env):
    cfg = make_cfg(f"algo={algo}", f"env={env}")
    check_job(cfg)  # what train() resolves before it builds the callbacks and the actors
    assert cfg.callbacks.push.every_n_steps == 100 and cfg.actors.init_random_frames == 1000
