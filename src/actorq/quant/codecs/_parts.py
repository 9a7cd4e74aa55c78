"""Building blocks codecs share: payload specs, fp32 parameters out, plain modules back in."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from actorq.quant.layout import ACTIVATIONS, Payload, PayloadSpec, TrunkLayout

FLOAT32 = torch.float32


def prefixed(prefix: str, tensors: dict[str, torch.Tensor]) -> Payload:
    """``{"weight": w}`` -> ``{prefix + "weight": w}``."""
    return {prefix + name: value for name, value in tensors.items()}


def float_payload_spec(layout: TrunkLayout, dtype: torch.dtype) -> PayloadSpec:
    """Every weight, bias and norm parameter at ``dtype``."""
    out: PayloadSpec = {}
    for k in range(layout.num_layers):
        out.update(float_layer_spec(layout, k, dtype))
    return out


def float_layer_spec(layout: TrunkLayout, k: int, dtype: torch.dtype) -> PayloadSpec:
    """Layer ``k``'s weight, bias and norm parameters at ``dtype``."""
    layer = layout.layers[k]
    out: PayloadSpec = {
        f"l{k}_weight": ((layer.out_features, layer.in_features), dtype),
        f"l{k}_bias": ((layer.out_features,), dtype),
    }
    if layer.norm:
        out.update(norm_payload_spec(layout, k, dtype))
    return out


def norm_payload_spec(layout: TrunkLayout, k: int, dtype: torch.dtype = FLOAT32) -> PayloadSpec:
    features = layout.layers[k].out_features
    return {f"l{k}_norm_weight": ((features,), dtype), f"l{k}_norm_bias": ((features,), dtype)}


def codes_payload_spec(layout: TrunkLayout, k: int, per_channel: bool) -> PayloadSpec:
    """Layer ``k``'s int8 weight codes, float32 scales, int32 zero points and float32 bias."""
    layer = layout.layers[k]
    channels = layer.out_features if per_channel else 1
    return {
        f"l{k}_weight": ((layer.out_features, layer.in_features), torch.int8),
        f"l{k}_weight_scale": ((channels,), FLOAT32),
        f"l{k}_weight_zero_point": ((channels,), torch.int32),
        f"l{k}_bias": ((layer.out_features,), FLOAT32),
    }


def weight_codes_payload_spec(layout: TrunkLayout, per_channel: bool) -> PayloadSpec:
    """Int8 weight codes (with scales and zero points), fp32 biases and norms, every layer."""
    out: PayloadSpec = {}
    for k, layer in enumerate(layout.layers):
        out.update(codes_payload_spec(layout, k, per_channel))
        if layer.norm:
            out.update(norm_payload_spec(layout, k))
    return out


def bias_of(linear: nn.Linear) -> torch.Tensor:
    """The bias, or zeros for a ``Linear(bias=False)``."""
    if linear.bias is None:
        return torch.zeros(linear.out_features)
    return linear.bias.detach()


def norm_params(norm: nn.LayerNorm, k: int, dtype: torch.dtype = FLOAT32) -> Payload:
    return {
        f"l{k}_norm_weight": norm.weight.detach().to(dtype, copy=True),
        f"l{k}_norm_bias": norm.bias.detach().to(dtype, copy=True),
    }


def float_payload(trunk: nn.Sequential, layout: TrunkLayout, dtype: torch.dtype) -> Payload:
    """Every weight, bias and norm parameter of an fp32 trunk, copied at ``dtype``."""
    payload: Payload = {}
    for k in range(layout.num_layers):
        payload.update(float_layer(trunk, layout, k, dtype))
    return payload


def float_layer(trunk: nn.Sequential, layout: TrunkLayout, k: int, dtype: torch.dtype) -> Payload:
    """Layer ``k``'s weight, bias and norm parameters of an fp32 trunk, copied at ``dtype``."""
    linear = layout.linear(trunk, k)
    payload: Payload = {
        f"l{k}_weight": linear.weight.detach().to(dtype, copy=True),
        f"l{k}_bias": bias_of(linear).to(dtype, copy=True),
    }
    if layout.layers[k].norm:
        payload.update(norm_params(layout.norm(trunk, k), k, dtype))
    return payload


def plain_linear(weight: torch.Tensor, bias: torch.Tensor) -> nn.Linear:
    """An ``nn.Linear`` whose parameters ARE these tensors (no copy)."""
    linear = nn.Linear(weight.shape[1], weight.shape[0], device="meta", dtype=weight.dtype)
    linear.weight = nn.Parameter(weight, requires_grad=False)
    linear.bias = nn.Parameter(bias, requires_grad=False)
    return linear


def plain_norm(layout: TrunkLayout, payload: Payload, k: int) -> nn.LayerNorm:
    weight = payload[f"l{k}_norm_weight"]
    norm = nn.LayerNorm(weight.shape[0], eps=layout.layers[k].norm_eps, device="meta", dtype=weight.dtype)
    norm.weight = nn.Parameter(weight, requires_grad=False)
    norm.bias = nn.Parameter(payload[f"l{k}_norm_bias"], requires_grad=False)
    return norm


def assemble(layout: TrunkLayout, payload: Payload, linear: Callable[[int], nn.Module]) -> nn.Sequential:
    """``linear(k) -> [LayerNorm from the payload] -> [activation]`` for every layer."""
    return nn.Sequential(*(m for k in range(layout.num_layers) for m in layer_modules(layout, payload, k, linear(k))))


def layer_modules(layout: TrunkLayout, payload: Payload, k: int, linear: nn.Module) -> list[nn.Module]:
    """``linear -> [LayerNorm from the payload] -> [activation]``: layer ``k`` around its ``Linear``."""
    layer = layout.layers[k]
    modules = [linear]
    if layer.norm:
        modules.append(plain_norm(layout, payload, k))
    if layer.activation is not None:
        modules.append(ACTIVATIONS[layer.activation]())
    return modules


def plain_trunk(layout: TrunkLayout, payload: Payload, weights: list[torch.Tensor] | None = None) -> nn.Sequential:
    """``nn.Linear``/``LayerNorm``/activations over the payload's tensors (shared, not copied);
    ``weights`` replaces the payload's ``l{k}_weight`` (e.g. dequantized codes)."""
    if weights is None:
        weights = [payload[f"l{k}_weight"] for k in range(layout.num_layers)]
    return assemble(layout, payload, lambda k: plain_linear(weights[k], payload[f"l{k}_bias"]))


def codes(payload: Payload, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Layer ``k``'s ``(int8 codes, scale, zero point, bias)``."""
    return (
        payload[f"l{k}_weight"],
        payload[f"l{k}_weight_scale"],
        payload[f"l{k}_weight_zero_point"],
        payload[f"l{k}_bias"],
    )


def dequantize_codes(payload: Payload, k: int) -> torch.Tensor:
    """Layer ``k``'s fp32 weight from its codes: ``(codes - zero_point) * scale`` per row."""
    weight, scale, zero_point, _ = codes(payload, k)
    return (weight.float() - zero_point.float()[:, None]) * scale.float()[:, None]


def stored_weights(layout: TrunkLayout, payload: Payload) -> list[torch.Tensor]:
    """Every layer's fp32 weight from a payload holding float weights or int8 codes (with
    ``l{k}_weight_scale``), layer by layer."""
    return [
        dequantize_codes(payload, k) if f"l{k}_weight_scale" in payload else payload[f"l{k}_weight"].float()
        for k in range(layout.num_layers)
    ]
