"""Each codec's exact behaviour on small, hand-computed inputs: codes, scales and packing,
payloads that are copies of the trunk and match their spec, decoded trunks that compute what
the trunk did, the registry's messages and refusals, and the specs ``quant.bits=auto`` times."""

from __future__ import annotations

import pytest
import torch

from actorq.quant import _ao
from torch import nn

from actorq.util.errors import ConfigError
from actorq.quant import LayerLayout, QuantSpec, TrunkLayout
from actorq.quant.codecs import (
    bits_help,
    codec_for,
    dequantize_codes,
    full_precision,
    register,
    registered,
    unregister,
)
from actorq.quant.codecs.int4_packed import pack, unpack
from tests.helpers import Twelve

CODECS = {codec.name: codec for codec in registered()}
FP32, BF16, SIMULATED, INT4 = (CODECS[name] for name in ("fp32", "bf16", "simulated", "int4_packed"))
NORM_LAYOUT = TrunkLayout(
    layers=[LayerLayout(3, 5, norm=True, activation="relu", norm_eps=1e-2), LayerLayout(5, 2)]
)


def spec_for(name: str) -> QuantSpec:
    """A spec naming the codec by ``format``, at its widest bits and its first mode."""
    codec = CODECS[name]
    return QuantSpec(bits=max(codec.bits), mode=codec.modes[0] if codec.modes else "static", format=name)


def randomized(trunk: nn.Sequential) -> nn.Sequential:
    """Every parameter random, LayerNorm weights and biases included (not ones and zeros)."""
    with torch.no_grad():
        for parameter in trunk.parameters():
            parameter.copy_(torch.randn_like(parameter))
    return trunk.eval()


def norm_trunk() -> nn.Sequential:
    torch.manual_seed(0)
    return randomized(NORM_LAYOUT.build_float_trunk())


# ---------------------------------------------------------------------------- describe


@pytest.mark.parametrize(
    ("spec", "described"),
    [
        (QuantSpec(bits=8, mode="static", engine="onednn"), "int8 static per_channel fp32-ends onednn"),
        (QuantSpec(bits=8, mode="static", format="int8_static", engine="onednn"), "int8 static per_channel onednn"),
        (QuantSpec(bits=8, mode="dynamic", engine="onednn"), "int8 dynamic per_channel fp32-ends onednn"),
        (QuantSpec(bits=8, format="int8_dynamic", mode="dynamic", engine="onednn"), "int8 dynamic per_channel onednn"),
        (QuantSpec(bits=4, format="int4_packed"), "int4 packed per_channel"),
    ],
)
def test_a_spec_describes_its_engine_unless_it_is_the_default(spec, described):
    assert spec.describe() == described


# ---------------------------------------------------------------------------- payloads


@pytest.mark.parametrize("name", ["fp32", "bf16", "int8_dynamic", "simulated", "int4_packed"])
def test_a_payload_matches_its_spec_and_is_a_copy_of_the_trunk(name):
    spec = spec_for(name)
    trunk = norm_trunk()
    payload = CODECS[name].encode(trunk, NORM_LAYOUT, spec, None)
    expected = CODECS[name].payload_spec(NORM_LAYOUT, spec)
    assert {key: (tuple(value.shape), value.dtype) for key, value in payload.items()} == expected
    before = {key: value.clone() for key, value in payload.items()}
    with torch.no_grad():
        for parameter in trunk.parameters():  # as the learner's next update does
            parameter.add_(1.0)
    for key, value in payload.items():
        torch.testing.assert_close(value, before[key], atol=0, rtol=0, msg=key)


@pytest.mark.parametrize("name", ["fp32", "int8_static_fp32_ends"])
def test_fp32_payloads_are_fp32_whatever_the_trunks_dtype(name):
    layout = TrunkLayout(sizes=(3, 4, 2))  # int8_static_fp32_ends: the two ends only
    spec = spec_for(name)
    payload = CODECS[name].encode(layout.build_float_trunk().double(), layout, spec, None)
    assert {key: value.dtype for key, value in payload.items()} == {
        key: dtype for key, (_, dtype) in CODECS[name].payload_spec(layout, spec).items()
    } == dict.fromkeys(payload, torch.float32)


def test_payload_bytes_count_every_tensor_at_its_dtype():
    layout = TrunkLayout(sizes=(3, 4, 2))
    assert FP32.payload_nbytes(layout, QuantSpec(bits=32)) == (3 * 4 + 4 + 4 * 2 + 2) * 4
    per_channel, per_tensor = (QuantSpec(bits=4, mode="dynamic", granularity=g) for g in ("per_channel", "per_tensor"))
    codes, biases = 3 * 4 + 4 * 2, (4 + 2) * 4
    assert SIMULATED.payload_nbytes(layout, per_channel) == codes + biases + (4 + 2) * (4 + 4)
    assert SIMULATED.payload_nbytes(layout, per_tensor) == codes + biases + 2 * (4 + 4)


# ---------------------------------------------------------------------------- decoded trunks


@pytest.mark.parametrize("name", ["fp32", "bf16"])
def test_a_float_payload_decodes_to_the_trunks_layout_and_weights_without_gradients(name):
    spec = QuantSpec(bits=CODECS[name].bits[0])
    trunk = norm_trunk()
    payload = CODECS[name].encode(trunk, NORM_LAYOUT, spec, None)
    decoded = CODECS[name].decode(NORM_LAYOUT, spec, payload)
    observations = torch.randn(16, 3)
    out = decoded(observations)
    assert out.dtype == torch.float32  # cast back after a bf16 trunk
    assert not any(parameter.requires_grad for parameter in decoded.parameters())
    weights = CODECS[name].dequantized_weights(NORM_LAYOUT, spec, payload)
    dtype = payload["l0_weight"].dtype
    for k, weight in enumerate(weights):
        torch.testing.assert_close(weight, NORM_LAYOUT.linear(trunk, k).weight.to(dtype).float(), atol=0, rtol=0)
    if name == "fp32":
        assert TrunkLayout.from_trunk(decoded) == NORM_LAYOUT  # widths and norm eps included
        torch.testing.assert_close(out, trunk(observations), atol=0, rtol=0)


def test_codes_dequantize_around_their_zero_point():
    payload = {
        "l0_weight": torch.tensor([[3, 1], [0, -2]], dtype=torch.int8),
        "l0_weight_scale": torch.tensor([0.5, 2.0]),
        "l0_weight_zero_point": torch.tensor([2, -1], dtype=torch.int32),
        "l0_bias": torch.zeros(2),
    }
    torch.testing.assert_close(dequantize_codes(payload, 0), torch.tensor([[0.5, -0.5], [2.0, -2.0]]))


# ---------------------------------------------------------------------------- n-bit codes


def test_simulated_codes_fill_the_signed_range_of_their_bits():
    """4 bits: scale max|w| / 7.5; the largest weight rounds to 8 and is clamped to 7."""
    trunk = nn.Sequential(nn.Linear(3, 1))
    with torch.no_grad():
        trunk[0].weight.copy_(torch.tensor([[3.75, -3.75, 1.0]]))
    spec = QuantSpec(bits=4, mode="dynamic")
    payload = SIMULATED.encode(trunk, TrunkLayout.from_trunk(trunk), spec, None)
    assert payload["l0_weight"].tolist() == [[7, -8, 2]]
    assert payload["l0_weight_scale"].tolist() == [0.5]
    assert payload["l0_weight_zero_point"].tolist() == [0]


def test_int4_codes_are_rounded_on_a_per_row_scale_and_packed_two_a_byte():
    trunk = nn.Sequential(nn.Linear(3, 2))
    with torch.no_grad():
        trunk[0].weight.copy_(torch.tensor([[3.5, -1.0, 1.5], [-7.0, 0.0, 1.0]]))
    layout = TrunkLayout.from_trunk(trunk)
    spec = QuantSpec(bits=4, format="int4_packed")
    payload = INT4.encode(trunk, layout, spec, None)
    assert payload["l0_weight_scale"].tolist() == [0.5, 1.0]  # max |w| / 7
    # codes [7, -2, 3] and [-7, 0, 1] -> nibbles [15, 6, 11] and [1, 8, 9], padded with 8
    assert payload["l0_weight"].tolist() == [[15 | 6 << 4, 11 | 8 << 4], [1 | 8 << 4, 9 | 8 << 4]]
    assert INT4.dequantized_weights(layout, spec, payload)[0].tolist() == trunk[0].weight.tolist()


def test_int4_unpack_inverts_pack_at_odd_and_even_widths():
    codes = torch.arange(-8, 8, dtype=torch.float32).repeat(3, 1)[:, torch.randperm(16)]
    for width in (16, 7, 5):
        assert pack(codes[:, :width]).shape == (3, (width + 1) // 2)
        torch.testing.assert_close(unpack(pack(codes[:, :width]), width), codes[:, :width], atol=0, rtol=0)
    assert pack(torch.tensor([[1.0, -2.0, 3.0]])).tolist() == [[9 | 6 << 4, 11 | 8 << 4]]


def test_int4_decodes_a_layer_norm_trunk_close_to_the_trunk():
    spec = QuantSpec(bits=4, format="int4_packed")
    trunk = norm_trunk()
    decoded = INT4.decode(NORM_LAYOUT, spec, INT4.encode(trunk, NORM_LAYOUT, spec, None))
    observations = torch.randn(64, 3)
    error = (decoded(observations) - trunk(observations)).abs().mean() / trunk(observations).abs().mean()
    assert error < 0.2


# ---------------------------------------------------------------------------- int8 static


def test_an_unsupported_activation_after_a_layer_norm_is_named_at_its_index():
    trunk = nn.Sequential(nn.Linear(3, 8), nn.LayerNorm(8), nn.Tanh(), nn.Linear(8, 2))
    with pytest.raises(ConfigError, match=r"trunk\[2\] is Tanh: use quant\.mode=dynamic"):
        CODECS["int8_static"].check_layout(TrunkLayout.from_trunk(trunk))


@pytest.mark.parametrize(("first_activation", "low"), [("relu", 0.0), ("tanh", -20.0), (None, -20.0)])
def test_a_fixed_observer_quantizes_the_middle_over_the_first_layers_output_range(first_activation, low,
                                                                                 monkeypatch):
    """int8_static_fp32_ends: the middle's input is the fp32 first layer's output, in
    ``[0, activation_max]`` after a ReLU, else in ``[-activation_max, activation_max]``."""
    monkeypatch.setattr(_ao, "kernels_saturate", lambda spec: True)  # as on a CPU without VNNI
    layout = TrunkLayout(layers=[
        LayerLayout(3, 8, activation=first_activation), LayerLayout(8, 8, activation="relu"), LayerLayout(8, 2)
    ])
    spec = QuantSpec(bits=8, mode="static", observer="fixed", activation_max=20.0)
    payload = CODECS["int8_static_fp32_ends"].encode(randomized(layout.build_float_trunk()), layout, spec, None)
    scale = (20.0 - low) / 127  # 7-bit range: the input feeds an int8 Linear
    assert payload["input_scale"].item() == pytest.approx(scale, rel=1e-6)
    assert payload["input_zero_point"].item() == round(-low / scale)


@pytest.mark.parametrize("sizes", [(3, 4, 2), (3, 8, 8, 2)])
def test_the_fp32_ends_reference_keeps_the_trunk_as_it_was(sizes):
    """The reference copies the fp32 layers: later updates of the trunk do not reach it."""
    torch.manual_seed(0)
    trunk = randomized(TrunkLayout(sizes=sizes).build_float_trunk())
    spec = QuantSpec(bits=8, mode="static", observer="fixed")
    reference = CODECS["int8_static_fp32_ends"].reference(trunk, spec, None)
    observations = torch.randn(16, 3)
    before = reference(observations)
    if len(sizes) == 3:  # nothing between the ends: the trunk itself, in fp32
        torch.testing.assert_close(before, trunk(observations), atol=0, rtol=0)
    with torch.no_grad():
        for parameter in trunk.parameters():
            parameter.add_(1.0)
    torch.testing.assert_close(reference(observations), before, atol=0, rtol=0)


# ---------------------------------------------------------------------------- the registry


def test_full_precision_is_the_fp32_codec():
    assert full_precision() is FP32


def test_auto_must_be_resolved_first_in_one_line():
    with pytest.raises(ConfigError, match=r"^quant\.bits=auto must be resolved with actorq\.quant\.select_precision first$"):
        codec_for(QuantSpec(bits="auto"))


def test_a_mode_the_bits_do_not_run_is_refused_by_the_codec_serving_them():
    with pytest.raises(ConfigError, match=(
        r"^quant\.bits=4 is simulated weight-only quantization and needs quant\.mode=dynamic; "
        r"quant\.mode=static \(calibrated activations, real int8 kernels\) needs quant\.bits=8$"
    )):
        QuantSpec(bits=4, mode="static")
    with pytest.raises(ConfigError, match=r"^quant\.format=simulated serves quant\.bits=2/3/4/5/6/7, got 8$"):
        QuantSpec(bits=8, mode="dynamic", format="simulated")


def registers(**attributes) -> bool:
    """Whether ``register`` takes a ``Twelve`` with these class attributes (removed again)."""
    codec = type("Variant", (Twelve,), attributes)
    try:
        register(codec)
    except ValueError:
        return False
    unregister(codec.name)
    return True


@pytest.mark.parametrize(
    ("attributes", "taken"),
    [
        ({"bits": (8,), "modes": ("static",)}, False),  # int8_static_fp32_ends runs it
        ({"bits": (8,), "modes": ()}, False),  # any mode: int8_dynamic's and int8_static_fp32_ends's
        ({"bits": (16,), "modes": ("static",)}, False),  # bf16 runs any mode
        ({"bits": (8,), "modes": ("sparse",)}, True),  # no codec serving 8 bits runs it
        ({"bits": (8,), "modes": ("static",), "implicit": False}, True),  # named by format only
    ],
)
def test_implicit_codecs_cannot_share_bits_and_a_mode(attributes, taken):
    assert registers(**attributes) is taken


def test_registration_refusals_say_what_to_do():
    with pytest.raises(ValueError, match="^codec twelve: an implicit codec must list the bits it serves$"):
        register(type("Variant", (Twelve,), {"bits": ()}))
    with pytest.raises(ValueError, match=(
        r"^codec twelve serves the same quant\.bits/mode as bf16; "
        r"set implicit = False and select it with QuantSpec\(format=\.\.\.\)$"
    )):
        register(type("Variant", (Twelve,), {"bits": (16,)}))
    assert "twelve" not in CODECS and "twelve" not in [codec.name for codec in registered()]


def test_a_codec_named_by_format_only_stays_out_of_the_bits_message():
    register(type("Variant", (Twelve,), {"implicit": False}))
    try:
        assert bits_help() == "32 (fp32), 16 (bf16), 8 (int8), 2..7 (simulated)"
    finally:
        unregister("twelve")


def test_a_codec_of_two_modes_lists_both_when_refusing_a_third():
    register(type("Variant", (Twelve,), {"implicit": False, "modes": ("sparse", "dense")}))
    try:
        with pytest.raises(ConfigError, match=r"^quant\.bits=12 \(twelve\) needs quant\.mode=sparse or dense, got static$"):
            QuantSpec(bits=12, mode="static", format="twelve")
    finally:
        unregister("twelve")


# ---------------------------------------------------------------------------- auto's candidates


@pytest.mark.parametrize(
    ("name", "spec", "bits", "mode", "format_"),
    [
        ("fp32", QuantSpec(bits=8, mode="static"), 32, "static", None),  # any mode: the spec's stays
        ("bf16", QuantSpec(bits=8, mode="dynamic"), 16, "dynamic", None),
        ("int8_dynamic", QuantSpec(bits=8, mode="static"), 8, "dynamic", "int8_dynamic"),  # its one mode
        ("int8_dynamic", QuantSpec(bits=32, mode="dynamic"), 8, "dynamic", "int8_dynamic"),
        ("int8_static_fp32_ends", QuantSpec(bits=16, mode="static"), 8, "static", None),
        ("int8_static", QuantSpec(bits=32, mode="dynamic"), 8, "static", "int8_static"),  # named by format
        ("simulated", QuantSpec(bits=32, mode="static"), 7, "dynamic", None),  # its widest bits
    ],
)
def test_auto_times_each_codec_at_its_bits_and_mode_with_the_specs_other_settings(name, spec, bits, mode, format_):
    spec = QuantSpec(**{**spec.__dict__, "granularity": "per_tensor", "observer": "fixed", "activation_max": 7.0})
    candidate = CODECS[name].candidate_spec(spec)
    assert (candidate.bits, candidate.mode, candidate.format) == (bits, mode, format_)
    assert candidate.codec is CODECS[name]
    assert (candidate.granularity, candidate.observer, candidate.activation_max) == ("per_tensor", "fixed", 7.0)
