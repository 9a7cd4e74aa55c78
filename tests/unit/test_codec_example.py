"""A worked example: a complete new precision format, defined here and registered through the
public registry (docs/quantization.md shows this code).

``fp16_storage`` carries the weights as float16, half the broadcast bytes of fp32, and the
actors compute in fp32. ``bits=16`` alone keeps meaning bf16: this codec is selected with
``QuantSpec(bits=16, format="fp16_storage")``.
"""

from __future__ import annotations

import pickle

import pytest
import torch

from actorq.envs import EnvSpec
from actorq.errors import ConfigError
from actorq.networks import DeterministicActor
from actorq.export import export
from actorq.quant import QuantizedNetwork, QuantSpec, action_error, fp32_nbytes, payload_nbytes, quantize
from actorq.quant.codecs import Codec, float_payload, float_payload_spec, plain_trunk, register, registered, unregister


class Fp16Storage(Codec):
    """Weights travel as float16; the actors decode them to fp32 and compute in fp32."""

    name = "fp16_storage"
    bits = (16,)  # serves QuantSpec(bits=16, format="fp16_storage")
    implicit = False  # bits=16 without a format stays bf16

    def describe(self, spec):
        return "fp16 storage"

    def payload_spec(self, layout, spec):
        return float_payload_spec(layout, torch.float16)

    def encode(self, trunk, layout, spec, calibration):
        return float_payload(trunk, layout, torch.float16)

    def decode(self, layout, spec, payload):
        return plain_trunk(layout, {name: tensor.float() for name, tensor in payload.items()})


SPEC = EnvSpec(obs_dim=17, discrete=False, action_dim=6, action_low=(-1.0,) * 6, action_high=(1.0,) * 6)


@pytest.fixture
def fp16_storage():
    """Registered for one test, then removed: nothing leaks into other tests."""
    register(Fp16Storage)
    try:
        yield QuantSpec(bits=16, format="fp16_storage")
    finally:
        unregister(Fp16Storage.name)


def test_fp16_storage_end_to_end(fp16_storage, tmp_path):
    torch.manual_seed(0)
    actor = DeterministicActor(SPEC, (256, 256)).eval()
    observations = torch.randn(256, SPEC.obs_dim)
    quantized = QuantizedNetwork.from_network(actor, fp16_storage)
    assert 0 < action_error(actor, quantized, observations) < 1e-3
    payload = quantize(actor, fp16_storage)
    assert {t.dtype for t in payload.values()} == {torch.float16}
    assert payload_nbytes(payload) * 2 == fp32_nbytes(actor)
    assert fp16_storage.describe() == "fp16 storage" and not fp16_storage.is_int8
    assert QuantSpec(bits=16).codec.name == "bf16"  # the plain bits=16 config is unchanged
    clone = pickle.loads(pickle.dumps(quantized))  # as a spawned worker receives it
    torch.testing.assert_close(clone(observations), quantized(observations), atol=0, rtol=0)
    scripted = torch.jit.load(str(export(quantized, tmp_path / "policy.pt")))
    torch.testing.assert_close(scripted(observations), quantized(observations), atol=0, rtol=0)


def test_the_registry_is_restored_after_the_example():
    before = registered()
    register(Fp16Storage)
    assert registered()[-1].name == "fp16_storage"
    unregister("fp16_storage")
    assert registered() == before
    with pytest.raises(ConfigError, match="quant.format must be one of fp32, bf16, int8_static"):
        QuantSpec(bits=16, format="fp16_storage")
