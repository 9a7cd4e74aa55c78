"""The worked example of docs/architecture.md (a new algorithm, which trains) runs as written."""

from __future__ import annotations

import sys

import torch

from actorq.algos.base import Exploration
from actorq.train import train
from tests.conftest import TINY
from tests.helpers import CONTINUOUS, example, fit_fixed_batch, load_module, random_sample


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
