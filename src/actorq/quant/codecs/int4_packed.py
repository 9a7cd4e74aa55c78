"""``quant.bits=4 quant.format=int4_packed``: 4-bit weights packed two codes to a byte, one
fp32 scale per output channel; biases and norms stay fp32. Actors unpack the codes once per
payload and compute in fp32, so a push copies about an eighth of fp32's weight bytes.

Not an ``auto`` candidate: ``auto`` times forwards, and this forward is fp32's own, so the
codec could only be picked by timing noise, at a larger action error than fp32.
"""

from __future__ import annotations

import torch

from actorq.quant.codecs._base import Codec, register
from actorq.quant.codecs._parts import FLOAT32, bias_of, norm_params, norm_payload_spec, plain_trunk

LEVELS = 7  # symmetric codes -7..7, stored as the nibbles 1..15


@register
class Int4Packed(Codec):
    name = "int4_packed"
    bits = (4,)
    implicit = False  # quant.bits=4 alone stays simulated; this one is named by quant.format

    def describe(self, spec):
        return "int4 packed per_channel"

    def payload_spec(self, layout, spec):
        out = {}
        for k, layer in enumerate(layout.layers):
            out[f"l{k}_weight"] = ((layer.out_features, (layer.in_features + 1) // 2), torch.uint8)
            out[f"l{k}_weight_scale"] = ((layer.out_features,), FLOAT32)
            out[f"l{k}_bias"] = ((layer.out_features,), FLOAT32)
            if layer.norm:
                out.update(norm_payload_spec(layout, k))
        return out

    def encode(self, trunk, layout, spec, calibration):
        payload = {}
        for k, layer in enumerate(layout.layers):
            linear = layout.linear(trunk, k)
            weight = linear.weight.detach().float()
            scale = (weight.abs().amax(dim=1) / LEVELS).clamp_min(torch.finfo(FLOAT32).tiny)
            payload[f"l{k}_weight"] = pack(torch.round(weight / scale[:, None]).clamp(-LEVELS, LEVELS))
            payload[f"l{k}_weight_scale"] = scale
            payload[f"l{k}_bias"] = bias_of(linear).float().clone()
            if layer.norm:
                payload.update(norm_params(layout.norm(trunk, k), k))
        return payload

    def dequantized_weights(self, layout, spec, payload):
        return [
            unpack(payload[f"l{k}_weight"], layer.in_features) * payload[f"l{k}_weight_scale"][:, None]
            for k, layer in enumerate(layout.layers)
        ]

    def decode(self, layout, spec, payload):
        return plain_trunk(layout, payload, self.dequantized_weights(layout, spec, payload))


def pack(codes: torch.Tensor) -> torch.Tensor:
    """``[out, in]`` codes in -8..7 -> ``[out, ceil(in / 2)]`` bytes: column ``2j`` in the low
    nibble of byte ``j``, column ``2j + 1`` in its high nibble (a zero code pads an odd width)."""
    nibbles = (codes.to(torch.int16) + 8).to(torch.uint8)
    if nibbles.shape[1] % 2:
        nibbles = torch.nn.functional.pad(nibbles, (0, 1), value=8)
    return nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)


def unpack(packed: torch.Tensor, in_features: int) -> torch.Tensor:
    """The inverse of :func:`pack`: ``[out, ceil(in / 2)]`` bytes -> ``[out, in]`` fp32 codes."""
    nibbles = torch.stack((packed & 0x0F, packed >> 4), dim=-1).reshape(packed.shape[0], -1)
    return nibbles[:, :in_features].float() - 8
