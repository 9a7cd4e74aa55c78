"""Activations that feed an int8 Linear keep 8 bits where the kernels sum them exactly, 7 where
they would saturate: the run-time measurement, not the CPU's name, decides (for torch.ao's
engines and for oneDNN's kernels on plain tensors alike)."""

from __future__ import annotations

import pytest
import torch

from actorq.algos.networks import DeterministicActor
from actorq.envs import EnvSpec
from actorq.quant import QuantSpec, _ao, onednn, quantize

SPEC = EnvSpec(obs_dim=4, discrete=False, action_dim=2, action_low=(-1.0, -1.0), action_high=(1.0, 1.0))


@pytest.mark.parametrize("saturates, levels", [(True, 127), (False, 255)])
@pytest.mark.parametrize("observer", ["learned", "fixed"])
def test_the_input_codes_use_the_range_the_engine_sums_exactly(monkeypatch, saturates, levels, observer):
    monkeypatch.setattr(_ao, "kernels_saturate", lambda spec: saturates)
    torch.manual_seed(0)
    actor = DeterministicActor(SPEC, (16, 16))
    spec = QuantSpec(bits=8, mode="static", format="int8_static", observer=observer, input_range=(-3.0, 5.0))
    calibration = torch.linspace(-3.0, 5.0, 64).unsqueeze(1).expand(64, 4)  # inputs span exactly [-3, 5]
    payload = quantize(actor, spec, calibration)
    assert float(payload["input_scale"]) == pytest.approx(8.0 / levels, rel=1e-5)


def test_the_measurement_is_made_once_per_engine():
    engine = _ao.DEFAULT_ENGINE
    first = _ao.saturates_full_range(engine)
    assert _ao.saturates_full_range(engine) is first
    assert _ao.saturates_full_range.cache_info().hits >= 1
    assert _ao.saturates_full_range("no-such-engine") is True  # unknown kernels keep 7 bits


@pytest.mark.parametrize("saturates", [True, False])
def test_dynamic_layers_quantize_their_inputs_on_the_bits_the_engine_sums_exactly(monkeypatch, saturates):
    monkeypatch.setattr(_ao, "saturates_full_range", lambda engine: saturates)
    torch.manual_seed(0)
    actor = DeterministicActor(SPEC, (64, 64))
    spec = QuantSpec(bits=8, mode="dynamic", format="int8_dynamic")
    payload = quantize(actor, spec)
    layer = _ao.dynamic_linear(payload["l1_weight"], payload["l1_weight_scale"], payload["l1_weight_zero_point"],
                               payload["l1_bias"])
    inputs = torch.rand(16, 64) * 3
    packed = layer._packed_params._packed_params
    expected = torch.ops.quantized.linear_dynamic(inputs, packed, reduce_range=saturates)
    other = torch.ops.quantized.linear_dynamic(inputs, packed, reduce_range=not saturates)
    assert layer.reduce_range is saturates
    assert torch.equal(layer(inputs), expected) and not torch.equal(expected, other)
    converted = _ao.convert_dynamic(actor.trunk, spec)  # torch.ao's own conversion, the reference
    assert all(module.reduce_range is saturates for module in converted.modules()
               if isinstance(module, _ao.DynamicLinear))


@pytest.mark.skipif(not onednn.available(), reason="this torch build has no oneDNN int8 matmul")
def test_the_learner_asks_the_kernels_the_actors_will_run(monkeypatch):
    monkeypatch.setattr(onednn, "saturates_full_range", lambda: True)
    monkeypatch.setattr(_ao, "saturates_full_range", lambda engine: False)
    assert _ao.kernels_saturate(QuantSpec(bits=8, mode="static", engine="plain")) is True
    assert _ao.kernels_saturate(QuantSpec(bits=8, mode="static")) is False


@pytest.mark.skipif(not onednn.available(), reason="this torch build has no oneDNN int8 matmul")
@pytest.mark.parametrize("saturates", [True, False])
def test_plain_dynamic_layers_quantize_their_inputs_on_the_bits_the_kernels_sum_exactly(monkeypatch, saturates):
    monkeypatch.setattr(onednn, "saturates_full_range", lambda: saturates)
    torch.manual_seed(0)
    payload = quantize(DeterministicActor(SPEC, (64, 64)), QuantSpec(bits=8, mode="dynamic", format="int8_dynamic"))
    layer = onednn.DynamicInt8Linear(payload["l1_weight"], payload["l1_weight_scale"], payload["l1_weight_zero_point"],
                                     payload["l1_bias"])
    assert layer.quant_max == (127 if saturates else 255)
    inputs = torch.rand(16, 64) * 3
    weight = payload["l1_weight"].float() * payload["l1_weight_scale"][:, None]
    error = (layer(inputs) - (inputs @ weight.t() + payload["l1_bias"])).abs().max()
    assert error < (0.05 if saturates else 0.025)


@pytest.mark.parametrize("quant_max", [127, 255])
def test_a_relus_output_takes_the_qparams_of_its_whole_range_from_its_largest_value(quant_max):
    torch.manual_seed(0)
    for x in (torch.relu(torch.randn(16, 300)) * 5, torch.zeros(4, 8), torch.relu(torch.randn(1, 7)) * 1e-3):
        assert onednn.nonnegative_qparams(x, quant_max) == onednn.dynamic_qparams(x, quant_max)


@pytest.mark.parametrize("quant_max", [127, 255])
def test_a_batchs_own_range_quantizes_to_the_nearest_code_without_wrapping(quant_max):
    # The dynamic layers' one-pass quantize relies on the zero point being rounded down.
    # Rounded to nearest it can round up by half a code, and the top of the range then lands
    # on quant_max + 1 (a uint8 256 wraps to 0): here -low / scale is exactly 1.5.
    scale = 1 / 64
    tie = torch.tensor([-1.5 * scale, 0.0, (quant_max - 1.5) * scale])
    assert onednn.dynamic_qparams(tie, quant_max) == (scale, 1)
    assert onednn.quantize_in_range(tie, scale, 1).tolist() == [0, 1, quant_max]
    torch.manual_seed(0)
    for _ in range(200):
        x = torch.randn(8, 33) * torch.rand(()) * 4 + torch.randn(()) * 2
        scale, zero_point = onednn.dynamic_qparams(x, quant_max)
        codes = onednn.quantize_in_range(x, scale, zero_point)
        assert int(onednn.quantize_in_range(torch.zeros(1), scale, zero_point)) == zero_point  # 0 is a code
        exact = x.double() / scale + zero_point
        nearest = torch.floor(exact + 0.5).clamp(0, quant_max)
        assert int(codes.max()) <= quant_max and float((codes.double() - nearest).abs().max()) <= 1
        assert ((codes.double() - nearest).abs() > 0).float().mean() < 0.01  # only fp32 rounding ties differ
        interior = exact >= 0.5  # not clamped at the bottom of the range
        error = ((codes.double() - zero_point) * scale - x.double()).abs()
        assert float(error[interior].max()) <= scale * (0.5 + 1e-4)
