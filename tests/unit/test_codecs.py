"""The codec registry: which codec runs a spec, and how a new format or observer plugs in."""

from __future__ import annotations

import pytest
import torch

from actorq.util.errors import ConfigError
from actorq.algos.networks import mlp
from actorq.quant import QuantSpec, TrunkLayout, _ao, codec_for
from actorq.quant.codecs import bits_help, register, registered
from actorq.quant.codecs import unregister
from tests.helpers import Twelve


@pytest.mark.parametrize(
    ("spec", "name", "described"),
    [
        (QuantSpec(bits=32), "fp32", "fp32"),
        (QuantSpec(bits=16), "bf16", "bf16"),
        (QuantSpec(bits=8, mode="static"), "int8_static_fp32_ends", "int8 static per_channel fp32-ends"),
        (QuantSpec(bits=8, mode="static", format="int8_static"), "int8_static", "int8 static per_channel"),
        (QuantSpec(bits=8, mode="dynamic", granularity="per_tensor"), "int8_dynamic_fp32_ends",
         "int8 dynamic per_tensor fp32-ends"),
        (QuantSpec(bits=4, mode="dynamic"), "simulated", "4-bit simulated per_channel"),
        (QuantSpec(bits=8, format="int8_dynamic", mode="dynamic"), "int8_dynamic", "int8 dynamic per_channel"),
    ],
)
def test_each_spec_has_one_codec_that_describes_it(spec, name, described):
    by_name = {codec.name: codec for codec in registered()}
    # the one registered instance of the expected format, serving the spec's bits
    assert codec_for(spec) is by_name[name]
    assert spec.bits in by_name[name].bits
    assert spec.describe() == described


def test_builtins_in_order_and_the_bits_message_comes_from_them():
    assert [c.name for c in registered()] == [
        "fp32", "bf16", "int8_static", "int8_static_fp32_ends", "int8_dynamic", "int8_dynamic_fp32_ends", "simulated",
        "int4_packed"
    ]
    assert bits_help() == "32 (fp32), 16 (bf16), 8 (int8), 2..7 (simulated)"


def test_properties_come_from_the_codec():
    assert QuantSpec(bits=8, mode="static").is_static and not QuantSpec(bits=8, mode="dynamic").is_static
    assert QuantSpec(bits=32).is_full_precision and not QuantSpec(bits=16).is_full_precision
    assert not QuantSpec(bits="auto").is_full_precision and not QuantSpec(bits="auto").is_static
    with pytest.raises(ConfigError, match="select_precision"):
        QuantSpec(bits="auto").codec


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"bits": 8, "format": "nope"}, "quant.format must be one of fp32, bf16, int8_static, int8_static_fp32_ends, int8_dynamic, "
                                          "int8_dynamic_fp32_ends, simulated"),
        ({"bits": 32, "format": "bf16"}, "quant.format=bf16 serves quant.bits=16, got 32"),
        ({"bits": 8, "mode": "static", "format": "int8_dynamic"}, "needs quant.mode=dynamic"),
        ({"bits": "auto", "format": "fp32"}, "drop quant.format"),
    ],
)
def test_format_mistakes_fail_with_one_clear_line(kwargs, says):
    with pytest.raises(ConfigError, match=says):
        QuantSpec(**kwargs)


def test_with_bits_drops_the_format():
    assert QuantSpec(bits=8, mode="dynamic", format="int8_dynamic").with_bits(32).codec.name == "fp32"


def test_with_bits_keeps_the_mode_where_the_codec_serving_the_bits_runs_it():
    static, dynamic = QuantSpec(bits=8, mode="static"), QuantSpec(bits=8, mode="dynamic")
    assert dynamic.with_bits(8).codec.name == "int8_dynamic_fp32_ends" and static.with_bits(16).mode == "static"
    assert static.with_bits(4).codec.name == "simulated"  # 4 bits run dynamic only


def test_a_registered_format_widens_quant_bits_until_unregistered():
    with pytest.raises(ConfigError, match="quant.bits must be"):
        QuantSpec(bits=12)
    register(Twelve)
    try:
        assert QuantSpec(bits=12).codec.name == "twelve"
        assert bits_help() == "32 (fp32), 16 (bf16), 12 (twelve), 8 (int8), 2..7 (simulated)"
        with pytest.raises(ValueError, match="already registered"):
            register(Twelve)
    finally:
        unregister("twelve")
    with pytest.raises(ConfigError, match="quant.bits must be"):
        QuantSpec(bits=12)


def test_two_implicit_codecs_cannot_claim_the_same_bits():
    class AnotherBf16(Twelve):
        name = "another_bf16"
        bits = (16,)

    with pytest.raises(ValueError, match="same quant.bits/mode as bf16"):
        register(AnotherBf16)
    assert "another_bf16" not in [c.name for c in registered()]


def test_a_new_observer_is_one_table_entry(monkeypatch):
    """quant.calibration accepts exactly _ao.CALIBRATION_OBSERVERS's keys; an entry may carry a parameter."""
    calls = []

    def fast_moving_average(spec, reduce_range):
        calls.append(reduce_range)
        return _ao.tqo.MovingAverageMinMaxObserver.with_args(
            averaging_constant=0.5, dtype=_ao.ACTIVATION_DTYPE, reduce_range=reduce_range
        )

    with pytest.raises(ConfigError, match="quant.calibration must be one of minmax, moving_average, histogram"):
        QuantSpec(calibration="fast_moving_average")
    monkeypatch.setitem(_ao.CALIBRATION_OBSERVERS, "fast_moving_average", fast_moving_average)
    monkeypatch.setattr(_ao, "kernels_saturate", lambda spec: True)  # as on a CPU without VNNI
    spec = QuantSpec(bits=8, mode="static", calibration="fast_moving_average")
    from actorq.quant import quantize

    class Policy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.trunk, self.head = mlp(5, (16, 16), 2), torch.nn.Identity()

    payload = quantize(Policy(), spec, calibration=torch.randn(64, 5))
    # the first and last Linear stay fp32; the trunk default and the input of the one between
    # them: 7 bits where the kernel would saturate; its output feeds the fp32 last Linear, not
    # an int8 kernel: full 8 bits
    assert calls == [True, True, False]
    assert set(payload) == set(spec.codec.payload_spec(TrunkLayout(sizes=(5, 16, 16, 2)), spec))


def test_a_spec_dict_is_its_fields_only():
    """Callers rebuild specs with QuantSpec(**{**spec.__dict__, "bits": ...})."""
    spec = QuantSpec(bits=8, mode="dynamic")
    assert QuantSpec(**{**spec.__dict__, "bits": 4}).describe() == "4-bit simulated per_channel"
