"""The worked examples of docs/architecture.md run as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import torch

from tests.helpers import CONTINUOUS

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
