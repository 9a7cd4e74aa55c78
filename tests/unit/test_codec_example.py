"""The worked example of a new precision format: ``int4_packed``, one file in
``actorq/quant/codecs/``, shown whole in docs/quantization.md.

The docs block is the shipped file, and the block itself runs here: registered (in place of
the shipped codec) through the public registry, then through everything a run does with a
format (quantize, the actors' network, in-place loads, pickling, fidelity metrics, export).
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from actorq.envs import EnvSpec
from actorq.export import export
from actorq.algos.networks import DeterministicActor, QNetwork
from actorq.quant import QuantizedNetwork, QuantSpec, TrunkLayout, fidelity_metrics, fp32_nbytes, quantize
from actorq.quant.codecs import _base, registered
from tests.helpers import example, load_module

SPEC = EnvSpec(obs_dim=17, discrete=False, action_dim=6, action_low=(-1.0,) * 6, action_high=(1.0,) * 6)
INT4 = QuantSpec(bits=4, format="int4_packed")
CODEC_FILE = Path(__file__).parents[2] / "src" / "actorq" / "quant" / "codecs" / "int4_packed.py"


def test_the_docs_show_the_shipped_codec_file_whole():
    assert example("precision-format", "quantization.md") == CODEC_FILE.read_text()


@pytest.fixture
def docs_codec(monkeypatch):
    """The docs' block run as a module of its own, its ``@register`` filling a registry
    without the shipped ``int4_packed`` (the registry as it was before the file existed);
    the registry is restored afterwards."""
    before = registered()
    monkeypatch.setattr(_base, "_REGISTRY", {c.name: c for c in before if c.name != "int4_packed"})
    monkeypatch.setitem(sys.modules, "docs_int4_packed", None)  # removed again afterwards
    module = load_module("docs_int4_packed", example("precision-format", "quantization.md"))
    codec = INT4.codec
    assert type(codec) is module.Int4Packed  # the block's class, not the shipped one
    yield codec
    monkeypatch.undo()
    assert registered() == before


def test_the_example_packs_two_codes_a_byte_and_the_actors_stay_close_to_fp32(docs_codec, tmp_path):
    torch.manual_seed(0)
    actor = DeterministicActor(SPEC, (255, 64)).eval()  # an odd width: the last byte is half padding
    observations = torch.randn(256, SPEC.obs_dim)
    payload = quantize(actor, INT4)
    assert payload["l1_weight"].dtype == torch.uint8 and payload["l1_weight"].shape == (64, 128)
    assert payload["l0_weight_scale"].shape == (255,)  # one scale per output channel
    weights = docs_codec.dequantized_weights(TrunkLayout.from_trunk(actor.trunk), INT4, payload)
    for k, weight in enumerate(weights):
        original = actor.trunk[2 * k].weight
        assert weight.shape == original.shape
        assert max(row.unique().numel() for row in weight) <= 15  # codes -7..7, per-row scale
        torch.testing.assert_close(weight, original, atol=original.abs().max().item() / 14, rtol=0)

    quantized = QuantizedNetwork.from_network(actor, INT4)
    metrics = fidelity_metrics(actor, quantized, observations, SPEC)
    assert 0 < metrics["quant/action_error"] < 0.025  # a fraction of the action range (2)
    assert 0 < metrics["quant/weight_error"] < 0.15
    assert metrics["quant/payload_bytes"] < fp32_nbytes(actor) / 4  # weights: 1/8, biases stay fp32
    assert INT4.describe() == "int4 packed per_channel" and QuantSpec(bits=4, mode="dynamic").codec.name == "simulated"

    worker = QuantizedNetwork.template_for(actor, INT4)  # what TorchRL's weight sync does
    TensorDict.from_module(worker).update_(TensorDict.from_module(quantized))
    torch.testing.assert_close(worker(observations), quantized(observations), atol=0, rtol=0)
    clone = pickle.loads(pickle.dumps(quantized))  # as a spawned worker receives it
    torch.testing.assert_close(clone(observations), quantized(observations), atol=0, rtol=0)
    scripted = torch.jit.load(str(export(quantized, tmp_path / "policy.pt")))
    torch.testing.assert_close(scripted(observations), quantized(observations), atol=0, rtol=0)


def test_the_example_keeps_a_q_networks_greedy_actions(docs_codec):
    torch.manual_seed(0)
    spec = EnvSpec(obs_dim=8, discrete=True, num_actions=4)
    q_network = QNetwork(spec, (64, 64)).eval()
    observations = torch.randn(512, 8)
    metrics = fidelity_metrics(q_network, QuantizedNetwork.from_network(q_network, INT4), observations, spec)
    assert metrics["quant/greedy_agreement"] > 0.9
