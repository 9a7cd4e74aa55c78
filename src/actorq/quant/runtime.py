"""Worker side: a payload -> an executable trunk (``nn.Sequential``) at the payload's precision.

fp32 and simulated n-bit trunks are ordinary ``nn.Linear`` layers (n-bit weights are
dequantized once here); bf16 trunks cast in and out; int8 trunks are torch.ao quantized
modules rebuilt from the payload's codes and scales. All of them are TorchScript-able, which
is what :func:`actorq.quant.export` relies on.
"""

from __future__ import annotations

import torch
from torch import nn

from actorq.quant import _ao
from actorq.quant.layout import TrunkLayout
from actorq.quant.quantize import Payload, dequantized_weights
from actorq.quant.spec import QuantSpec

LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, as actorq.networks.mlp builds it


class Cast(nn.Module):
    """Casts its input to a dtype (into and out of a bf16 trunk)."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.dtype)


def build_trunk(layout: TrunkLayout, spec: QuantSpec, payload: Payload) -> nn.Sequential:
    """The trunk an actor runs for ``payload`` (built again whenever a new payload arrives).

    Args:
        layout: the trunk's widths.
        spec: the payload's precision.
        payload: tensors named as ``layout.payload_spec(spec)``; fp32 weights are shared, not
            copied.
    """
    if spec.bits == 32:
        return _float_trunk(layout, payload, [payload[f"l{k}_weight"] for k in range(layout.num_layers)])
    if spec.bits == 16:
        layers = _float_trunk(layout, payload, [payload[f"l{k}_weight"] for k in range(layout.num_layers)])
        return nn.Sequential(Cast(torch.bfloat16), *layers, Cast(torch.float32))
    if spec.is_static:
        return _static_trunk(layout, payload)
    if spec.is_int8:
        return _dynamic_trunk(layout, payload)
    return _float_trunk(layout, payload, dequantized_weights(payload))


def _plain_linear(weight: torch.Tensor, bias: torch.Tensor) -> nn.Linear:
    linear = nn.Linear(weight.shape[1], weight.shape[0], device="meta", dtype=weight.dtype)
    linear.weight = nn.Parameter(weight, requires_grad=False)
    linear.bias = nn.Parameter(bias, requires_grad=False)
    return linear


def _plain_norm(payload: Payload, k: int) -> nn.LayerNorm:
    weight = payload[f"l{k}_norm_weight"]
    norm = nn.LayerNorm(weight.shape[0], eps=LAYER_NORM_EPS, device="meta", dtype=weight.dtype)
    norm.weight = nn.Parameter(weight, requires_grad=False)
    norm.bias = nn.Parameter(payload[f"l{k}_norm_bias"], requires_grad=False)
    return norm


def _float_trunk(layout: TrunkLayout, payload: Payload, weights: list[torch.Tensor]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for k, weight in enumerate(weights):
        layers.append(_plain_linear(weight, payload[f"l{k}_bias"]))
        if layout.has_norm(k):
            layers.append(_plain_norm(payload, k))
        if layout.has_relu(k):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _codes(payload: Payload, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return (
        payload[f"l{k}_weight"],
        payload[f"l{k}_weight_scale"],
        payload[f"l{k}_weight_zero_point"],
        payload[f"l{k}_bias"],
    )


def _dynamic_trunk(layout: TrunkLayout, payload: Payload) -> nn.Sequential:
    layers: list[nn.Module] = []
    for k in range(layout.num_layers):
        layers.append(_ao.dynamic_linear(*_codes(payload, k)))
        if layout.has_norm(k):
            layers.append(_plain_norm(payload, k))
        if layout.has_relu(k):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _static_trunk(layout: TrunkLayout, payload: Payload) -> nn.Sequential:
    layers: list[nn.Module] = [
        _ao.quantize_input(float(payload["input_scale"]), int(payload["input_zero_point"]))
    ]
    for k in range(layout.num_layers):
        fused_relu = layout.has_relu(k) and not layout.has_norm(k)
        out_scale, out_zero_point = float(payload[f"l{k}_scale"]), int(payload[f"l{k}_zero_point"])
        layers.append(_ao.static_linear(*_codes(payload, k), out_scale, out_zero_point, relu=fused_relu))
        if layout.has_norm(k):
            layers.append(
                _ao.static_layer_norm(
                    payload[f"l{k}_norm_weight"],
                    payload[f"l{k}_norm_bias"],
                    LAYER_NORM_EPS,
                    float(payload[f"l{k}_norm_scale"]),
                    int(payload[f"l{k}_norm_zero_point"]),
                )
            )
            layers.append(nn.ReLU())
    layers.append(_ao.dequantize())
    return nn.Sequential(*layers)
