"""Learner side: the fp32 policy network -> a payload of plain tensors for the actors.

A payload is a flat ``dict[str, torch.Tensor]`` of ordinary dtypes only (``int8`` codes,
``float32`` scales and biases, ``int32`` zero points, or ``bfloat16``/``float32`` weights), named
as :meth:`actorq.quant.layout.TrunkLayout.payload_spec` says. Plain tensors are what TorchRL's
shared-memory weight sync can copy; torch.ao's packed int8 parameters are invisible to it.

Example:
    >>> from actorq.envs import EnvSpec
    >>> from actorq.networks import DeterministicActor
    >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> actor = DeterministicActor(spec, hidden=(64, 64))
    >>> payload = quantize(actor, QuantSpec(bits=8, mode="static"), calibration=torch.randn(256, 3))
    >>> payload["l0_weight"].dtype, payload["l0_weight_scale"].shape, payload["input_scale"].dtype
    (torch.int8, torch.Size([64]), torch.float32)
"""

from __future__ import annotations

import torch
from torch import nn

from actorq.errors import ConfigError
from actorq.quant import _ao
from actorq.quant.layout import TrunkLayout
from actorq.quant.spec import QuantSpec

Payload = dict[str, torch.Tensor]


def quantize(network: nn.Module, spec: QuantSpec, calibration: torch.Tensor | None = None) -> Payload:
    """Post-training quantization of ``network.trunk`` into a payload.

    Args:
        network: an fp32 policy with a ``trunk`` (:func:`actorq.networks.mlp`) and a ``head``
            (kept fp32 and not part of the payload).
        spec: the precision; ``bits="auto"`` must be resolved first.
        calibration: recent observations ``[N, obs_dim]``; required when
            ``spec.needs_calibration`` (static mode, learned observer), ignored otherwise.

    Returns:
        The payload: a flat dict of plain tensors, detached copies of the learner's values.
    """
    layout = TrunkLayout.from_trunk(network.trunk)
    if spec.is_auto:
        raise ConfigError("quant.bits=auto must be resolved with actorq.quant.select_precision first")
    if spec.needs_calibration and (calibration is None or len(calibration) == 0):
        raise ValueError(
            "static quantization with a learned observer needs calibration observations; "
            "pass recent observations, or use quant.observer=fixed or quant.mode=dynamic"
        )
    with torch.no_grad():
        if spec.bits in (32, 16):
            return _float_payload(network.trunk, layout, torch.float32 if spec.bits == 32 else torch.bfloat16)
        if spec.is_static:
            return _static_payload(network.trunk, layout, spec, calibration)
        if spec.is_int8:
            return _dynamic_payload(network.trunk, layout, spec)
        return _simulated_payload(network.trunk, layout, spec)


def reference_module(
    network: nn.Module, spec: QuantSpec, calibration: torch.Tensor | None = None
) -> nn.Module:
    """The torch.ao module that :func:`quantize` extracts an int8 payload from, with the head.

    Useful to check that actors compute exactly what the learner quantized.
    """
    if not spec.is_int8:
        raise ConfigError(f"a torch.ao reference exists for quant.bits=8 only, got {spec.bits}")
    converted = _convert(network.trunk, spec, calibration)
    return nn.Sequential(converted, network.head).eval()


def payload_nbytes(payload: Payload) -> int:
    """Bytes a payload occupies (what a broadcast copies into every actor)."""
    return sum(t.numel() * t.element_size() for t in payload.values())


def dequantized_weights(payload: Payload) -> list[torch.Tensor]:
    """The fp32 weight matrix of every layer as the actors see it."""
    weights = []
    k = 0
    while f"l{k}_weight" in payload:
        weight = payload[f"l{k}_weight"]
        if f"l{k}_weight_scale" in payload:
            scale = payload[f"l{k}_weight_scale"].float()[:, None]
            zero_point = payload[f"l{k}_weight_zero_point"].float()[:, None]
            weight = (weight.float() - zero_point) * scale
        weights.append(weight.float())
        k += 1
    return weights


def _linear(trunk: nn.Sequential, layout: TrunkLayout, k: int) -> nn.Module:
    return trunk[layout.module_index(k)]


def _norm(trunk: nn.Sequential, layout: TrunkLayout, k: int) -> nn.Module:
    return trunk[layout.module_index(k) + 1]


def _float_payload(trunk: nn.Sequential, layout: TrunkLayout, dtype: torch.dtype) -> Payload:
    payload: Payload = {}
    for k in range(layout.num_layers):
        linear = _linear(trunk, layout, k)
        payload[f"l{k}_weight"] = linear.weight.detach().to(dtype, copy=True)
        payload[f"l{k}_bias"] = linear.bias.detach().to(dtype, copy=True)
        if layout.has_norm(k):
            payload.update(_norm_params(_norm(trunk, layout, k), k, dtype))
    return payload


def _norm_params(norm: nn.Module, k: int, dtype: torch.dtype = torch.float32) -> Payload:
    return {
        f"l{k}_norm_weight": norm.weight.detach().to(dtype, copy=True),
        f"l{k}_norm_bias": norm.bias.detach().to(dtype, copy=True),
    }


def _convert(trunk: nn.Sequential, spec: QuantSpec, calibration: torch.Tensor | None) -> nn.Module:
    per_channel = spec.granularity == "per_channel"
    if spec.mode == "dynamic":
        return _ao.convert_dynamic(trunk, per_channel=per_channel)
    return _ao.convert_static(
        trunk,
        calibration,
        per_channel=per_channel,
        observer=spec.observer,
        calibration_kind=spec.calibration,
        input_range=spec.input_range,
        activation_max=spec.activation_max,
    )


def _static_payload(
    trunk: nn.Sequential, layout: TrunkLayout, spec: QuantSpec, calibration: torch.Tensor | None
) -> Payload:
    converted = _convert(trunk, spec, calibration)
    payload = {f"input_{name}": value for name, value in _ao.input_qparams(converted).items()}
    for k in range(layout.num_layers):
        linear = _linear(converted.trunk, layout, k)
        payload.update({f"l{k}_{name}": value for name, value in _ao.linear_codes(linear).items()})
        payload.update({f"l{k}_{name}": value for name, value in _ao.output_qparams(linear).items()})
        if layout.has_norm(k):
            norm = _norm(converted.trunk, layout, k)
            payload.update(_norm_params(norm, k))
            payload.update({f"l{k}_norm_{name}": value for name, value in _ao.output_qparams(norm).items()})
    return payload


def _dynamic_payload(trunk: nn.Sequential, layout: TrunkLayout, spec: QuantSpec) -> Payload:
    converted = _convert(trunk, spec, None)
    payload: Payload = {}
    for k in range(layout.num_layers):
        codes = _ao.linear_codes(_linear(converted, layout, k))
        payload.update({f"l{k}_{name}": value for name, value in codes.items()})
        if layout.has_norm(k):
            payload.update(_norm_params(_norm(trunk, layout, k), k))
    return payload


def _simulated_payload(trunk: nn.Sequential, layout: TrunkLayout, spec: QuantSpec) -> Payload:
    """Weights rounded to ``spec.bits`` bits (symmetric), carried as int8 codes."""
    quant_min, quant_max = -(2 ** (spec.bits - 1)), 2 ** (spec.bits - 1) - 1
    per_channel = spec.granularity == "per_channel"
    payload: Payload = {}
    for k in range(layout.num_layers):
        linear = _linear(trunk, layout, k)
        weight = linear.weight.detach().float()
        scale, zero_point = _ao.weight_qparams(weight, spec.bits, per_channel)
        codes = torch.round(weight / scale[:, None]) + zero_point[:, None]
        payload[f"l{k}_weight"] = codes.clamp(quant_min, quant_max).to(torch.int8)
        payload[f"l{k}_weight_scale"] = scale
        payload[f"l{k}_weight_zero_point"] = zero_point
        payload[f"l{k}_bias"] = linear.bias.detach().float().clone()
        if layout.has_norm(k):
            payload.update(_norm_params(_norm(trunk, layout, k), k))
    return payload
