"""The worked example of docs/architecture.md (a new algorithm, which trains) runs as written."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from actorq.algos.base import Exploration
from actorq.train import train
from tests.conftest import TINY
from tests.helpers import CONTINUOUS, example, fit_fixed_batch, load_module, random_sample, scalars


def test_the_algorithm_example_learns_and_runs_from_the_command_line_override(make_cfg, monkeypatch):
    module = load_module("my_algos", example("algorithm"))
    monkeypatch.setitem(sys.modules, "my_algos", module)
    torch.manual_seed(0)
    learner = module.EnsembleTD3(CONTINUOUS, Exploration(0.1), actor_hidden=(32,), critic_hidden=(32,))
    assert len(learner.critics) == len(learner.critics_target) == 4
    losses, _ = fit_fixed_batch(learner, CONTINUOUS, updates=100)
    assert sum(losses[-10:]) < 0.9 * sum(losses[:10])
    # Each target is the minimum over a pair: between the ensemble's minimum and maximum.
    batch = random_sample(CONTINUOUS).batch
    learner.target_noise = 0.0  # no smoothing noise: the same next action in both
    with torch.no_grad():
        next_action = learner.target_action(batch["next_observation"])
        values = torch.stack([q(batch["next_observation"], next_action) for q in learner.critics_target])
    target = learner.td_target(batch)
    low = batch["reward"] + batch["discount"] * values.min(0).values
    high = batch["reward"] + batch["discount"] * values.max(0).values
    assert (target >= low - 1e-3).all() and (target <= high + 1e-3).all()

    summary, objects = train(make_cfg("+experiment=td3_pendulum", *TINY, "algo.actor_hidden=[32]",
                                      "algo.critic_hidden=[32]", "algo._target_=my_algos.EnsembleTD3",
                                      "callbacks=no_checkpoint"))
    assert type(objects["learner"]).__name__ == "EnsembleTD3"
    assert summary["learner_steps"] > 0 and summary["final_return"] is not None


def test_the_on_policy_example_learns_from_the_command_line_with_int8_actors(tmp_path):
    """The page's A2C module and experiment YAML, as a user saves them, trained by
    ``actorq train``: lock-step rounds of int8 actors that record their log-probabilities,
    and CartPole learned (random play scores about 22; 8 seeds reached 408-500 at best within
    the budget)."""
    (tmp_path / "my_a2c.py").write_text(example("on_policy"))
    experiments = tmp_path / "conf" / "experiment"
    experiments.mkdir(parents=True)
    (experiments / "a2c_cartpole.yaml").write_text(example("on_policy_experiment", language="yaml"))
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "actorq", "hydra.searchpath=[file://conf]", "+experiment=a2c_cartpole",
         "quant.bits=8", "actors.total_frames=40000", "eval.every_frames=5000", "eval.episodes=5",
         "callbacks=no_checkpoint", "~callbacks.carbon", "trainer.enable_progress_bar=false", f"run_dir={run_dir}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["actor_precision"].startswith("int8") and summary["frames"] >= 40000
    assert summary["best_return"] >= 200, summary["eval_history"]
    logged = scalars(run_dir / "tb")
    assert {lag for _, lag in logged["collect/policy_lag"]} == {0.0}  # lock-step: each round ran the newest policy
    weights = [weight for _, weight in logged["train/importance_weight"]]
    assert all(0.5 < weight <= 1.0 for weight in weights) and min(weights) < 1.0  # int8 mu differs from pi
