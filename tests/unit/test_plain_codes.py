"""An MLP's int8 payload computed without torch.ao (``quant.engine=plain``,
:mod:`actorq.quant.plain_codes`): the same codes and scales torch.ao's observers give, and a
push from learner to actor with every warning an error (torch warns at each quantized-dtype
tensor it makes and at torch.ao's import)."""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch
from torch import nn

from actorq.algos.networks import DeterministicActor
from actorq.envs import EnvSpec
from actorq.quant import QuantizedNetwork, QuantSpec, _ao, onednn, plain_codes, quantize
from actorq.quant.codecs._parts import prefixed
from actorq.util.errors import ConfigError

pytestmark = pytest.mark.skipif(not onednn.available(), reason="this torch build has no oneDNN int8 kernels")

SPEC = EnvSpec(obs_dim=17, discrete=False, action_dim=6, action_low=(-1.0,) * 6, action_high=(1.0,) * 6)


def _trunk(norm: bool) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(17, 64), *([nn.LayerNorm(64)] if norm else []), nn.ReLU(),
                         nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 6)).eval()


def _torch_ao_static(trunk: nn.Sequential, calibration: torch.Tensor, spec: QuantSpec) -> dict:
    observed = _ao.calibrate_static(trunk, calibration, spec)
    payload = prefixed("input_", _ao.observed_qparams(observed.quant))
    for k, (linear, norm) in enumerate(_ao.observed_layers(observed)):
        payload.update(prefixed(f"l{k}_", _ao.observed_linear(linear)))
        if norm is not None:
            payload.update(prefixed(f"l{k}_norm_", {**_ao.layer_norm_params(norm), **_ao.observed_qparams(norm)}))
    return payload


@pytest.mark.parametrize(("norm", "granularity", "observer"),
                         list(itertools.product([False, True], ["per_channel", "per_tensor"], ["learned", "fixed"])))
def test_the_static_payload_is_torch_aos_to_the_bit(norm, granularity, observer):
    trunk, calibration = _trunk(norm), 3 * torch.randn(300, 17, generator=torch.Generator().manual_seed(1))
    spec = QuantSpec(bits=8, mode="static", granularity=granularity, observer=observer, engine="plain")
    expected = _torch_ao_static(trunk, calibration, spec)
    payload = plain_codes.static_payload(trunk, calibration, spec, 127 if _ao.kernels_saturate(spec) else 255)
    assert sorted(payload) == sorted(expected)
    for name, tensor in expected.items():
        assert payload[name].dtype == tensor.dtype and torch.equal(payload[name], tensor), name


@pytest.mark.parametrize("granularity", ["per_channel", "per_tensor"])
def test_the_dynamic_payloads_codes_are_torch_aos_to_the_bit(granularity):
    trunk = _trunk(norm=False)
    converted = _ao.convert_dynamic(trunk, QuantSpec(bits=8, mode="dynamic", granularity=granularity))
    payload = plain_codes.dynamic_payload(trunk, per_channel=granularity == "per_channel")
    for k, (linear, _) in enumerate(_ao.quantized_layers(converted)):
        for name, tensor in prefixed(f"l{k}_", _ao.linear_codes(linear)).items():
            assert payload[name].dtype == tensor.dtype and torch.equal(payload[name], tensor), name


def test_a_moving_average_range_sees_each_chunk_once():
    """torch.ao's eager recipe moves a fused Linear-ReLU's moving average twice per chunk
    (its observer runs twice); the plain range moves once per chunk, as the constant means."""
    calibration = torch.arange(16.0).reshape(16, 1)
    points = [("input_", None, False)]
    spec = QuantSpec(bits=8, mode="static", calibration="moving_average", engine="plain")
    (seen,) = plain_codes._ranges(nn.Sequential(), points, calibration, spec)
    chunks = torch.chunk(calibration, 8)
    low, high = chunks[0].min(), chunks[0].max()
    for chunk in chunks[1:]:
        low, high = low + 0.01 * (chunk.min() - low), high + 0.01 * (chunk.max() - high)
    assert torch.isclose(seen.low, low) and torch.isclose(seen.high, high)


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_an_mlp_push_runs_with_every_warning_an_error(mode):
    torch.manual_seed(0)
    actor, observations = DeterministicActor(SPEC, (64, 64)).eval(), torch.randn(128, 17)
    spec = QuantSpec(bits=8, mode=mode, engine="plain")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        actors = QuantizedNetwork.template_for(actor, spec)
        actors.load_payload(quantize(actor, spec, observations))
        actions = actors(observations)
    assert any(isinstance(module, (onednn.Int8Linear, onednn.DynamicInt8Linear))
               for module in actors.executable_trunk().modules())
    with torch.no_grad():
        assert (actions - actor(observations)).abs().max() < 0.05


def test_the_histogram_search_is_refused_in_one_line():
    spec = QuantSpec(bits=8, mode="static", calibration="histogram", engine="plain")
    with pytest.raises(ConfigError, match="calibrates an MLP with minmax or moving_average ranges"):
        plain_codes.static_payload(_trunk(False), torch.randn(8, 17), spec, 255)


def test_the_fp32_ends_quantize_and_dequantize_in_their_own_pass_and_script():
    """``quant.bits=8``'s MLP copy on plain tensors runs its fp32 first layer into the int8
    codes, and the last int8 layer's codes into the fp32 last layer, each as one module
    (fewer passes over the activations), computing what torch.ao's copy computes; the copy
    scripts for ``actorq export``."""
    from tests.helpers import assert_computes_the_reference

    torch.manual_seed(0)
    actor, observations = DeterministicActor(SPEC, (64, 64, 64)).eval(), torch.randn(256, 17)
    plain = QuantizedNetwork.from_network(actor, QuantSpec(bits=8, mode="static", engine="plain"),
                                          calibration=observations).executable_trunk()
    assert [type(module) for module in plain] == [onednn.LinearToCodes, onednn.Int8Linear, onednn.Int8Linear,
                                                  onednn.CodesToLinear]
    reference = QuantizedNetwork.from_network(actor, QuantSpec(bits=8, mode="static"),
                                              calibration=observations).executable_trunk()
    with torch.no_grad():
        assert_computes_the_reference(plain(observations), reference(observations))
        assert torch.equal(torch.jit.script(plain)(observations), plain(observations))


def test_codes_with_a_zero_point_are_dequantized_before_the_fp32_layer():
    """Folding a zero point into the fp32 layer's bias would cancel large terms against each
    other (``(W s) c - z W s 1``): such codes keep their own dequantize."""
    linear = nn.Linear(8, 4)
    modules = onednn.fused_ends([onednn.Dequantize(0.1, 3), linear])
    assert [type(module) for module in modules] == [onednn.Dequantize, nn.Linear]
    codes = torch.randint(0, 256, (5, 8), dtype=torch.uint8)
    fused, = onednn.fused_ends([onednn.Dequantize(0.1, 0), linear])
    with torch.no_grad():
        assert torch.allclose(fused(codes), linear(onednn.Dequantize(0.1, 0)(codes)), atol=1e-5)


def test_a_dynamic_copy_runs_each_relu_in_its_int8_kernel_and_scripts():
    """``quant.bits=8 mode=dynamic`` on plain tensors: the ReLU after an int8 layer runs in its
    kernel, and the copy computes what torch.ao's dynamic copy computes."""
    from tests.helpers import assert_computes_the_reference

    torch.manual_seed(0)
    actor, observations = DeterministicActor(SPEC, (64, 64, 64)).eval(), torch.randn(256, 17)
    plain = QuantizedNetwork.from_network(actor, QuantSpec(bits=8, mode="dynamic", engine="plain"),
                                          calibration=observations).executable_trunk()
    assert [type(module) for module in plain] == [nn.Linear, nn.ReLU, onednn.DynamicInt8Linear,
                                                  onednn.DynamicInt8Linear, nn.Linear]
    assert all(module.linear.post_op == "relu" for module in plain if isinstance(module, onednn.DynamicInt8Linear))
    # Both read a ReLU's output (the fp32 end's, then the first's fused one): their range is its largest value.
    assert [module.nonnegative_input for module in plain if isinstance(module, onednn.DynamicInt8Linear)] == [True,
                                                                                                              True]
    reference = QuantizedNetwork.from_network(actor, QuantSpec(bits=8, mode="dynamic"),
                                              calibration=observations).executable_trunk()
    with torch.no_grad():
        assert_computes_the_reference(plain(observations), reference(observations))
        assert torch.equal(torch.jit.script(plain)(observations), plain(observations))
