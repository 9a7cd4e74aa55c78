"""Each learner family declares its push cadence and its random frames: PPO with no
experiment file pushes after every rollout and takes no random action, so the lag its
rollouts record is 0 in lock-step, in pushed versions and in learner steps; the
off-policy algorithms keep a push every 100 learner steps after 1000 random frames."""

from __future__ import annotations

import pytest

from actorq.envs import EnvSpec, make_env
from actorq.run.build import build_learner, check_job
from actorq.run.plan import make_plan
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
    check_job(cfg)  # what a sweep checks of each job: the plan, and every object built with it
    env_ = make_env(cfg.env.name, seed=cfg.seed)
    plan = make_plan(cfg, build_learner(cfg.algo, EnvSpec.from_env(env_), cfg.env.name))
    assert (plan.push_every_n_steps, plan.init_random_frames) == (100, 1000)
    assert cfg.callbacks.push.every_n_steps is None and cfg.actors.init_random_frames is None  # never written back
