"""The worked examples of docs/architecture.md run as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import torch

from actorq.algos.base import Exploration
from actorq.train import train
from tests.conftest import TINY
from tests.helpers import CONTINUOUS, fit_fixed_batch, random_sample

DOCS = Path(__file__).parents[2] / "docs"


def example(name: str, page: str = "architecture.md") -> str:
    """The python block that follows ``<!-- example: NAME -->`` on a docs page."""
    found = re.search(rf"<!-- example: {name} -->\s*```python\n(.*?)```", (DOCS / page).read_text(), re.S)
    assert found, f"no example {name!r} on {page}"
    return found.group(1)


def load_module(name: str, source: str, **names) -> types.ModuleType:
    """Executes ``source`` as module ``name`` (so Hydra's ``_target_`` finds it), with
    ``names`` defined first (what the page says the reader already has)."""
    module = types.ModuleType(name)
    module.__dict__.update(names)
    sys.modules[name] = module
    exec(compile(source, f"docs:{name}", "exec"), module.__dict__)
    return module


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


def test_the_precision_format_example_halves_broadcast_bytes_at_fp32_accuracy(monkeypatch):
    from actorq.networks import DeterministicActor
    from actorq.quant import QuantSpec, codecs, payload_nbytes, quantize

    torch.manual_seed(0)
    learner_actor = DeterministicActor(CONTINUOUS, (64, 64))
    try:
        module = load_module("my_codecs", example("precision-format", "quantization.md"),
                             learner_actor=learner_actor)
        monkeypatch.setitem(sys.modules, "my_codecs", module)
        observations = torch.randn(256, CONTINUOUS.obs_dim)
        error = (module.actors_copy(observations) - learner_actor(observations)).abs().max()
        assert 0 < error < 1e-3  # float16 weights: close to fp32, not identical
        fp16 = payload_nbytes(quantize(learner_actor, QuantSpec(bits=16, format="fp16_storage")))
        assert fp16 == payload_nbytes(quantize(learner_actor, QuantSpec(bits=32))) // 2
    finally:
        codecs.unregister("fp16_storage")
