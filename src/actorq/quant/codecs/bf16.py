"""``quant.bits=16``: bfloat16 parameters, the trunk computed in bfloat16 (cast in and out)."""

from __future__ import annotations

import torch
from torch import nn

from actorq.quant.codecs._base import Codec, register
from actorq.quant.codecs._parts import float_payload, float_payload_spec, plain_trunk


class Cast(nn.Module):
    """Casts its input to a dtype (into and out of a bf16 trunk)."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.dtype)


@register
class Bf16(Codec):
    name = "bf16"
    bits = (16,)
    bits_help = "16 (bf16)"
    auto_candidate = True

    def describe(self, spec):
        return "bf16"

    def payload_spec(self, layout, spec):
        return float_payload_spec(layout, torch.bfloat16)

    def encode(self, trunk, layout, spec, calibration):
        return float_payload(trunk, layout, torch.bfloat16)

    def decode(self, layout, spec, payload):
        return nn.Sequential(Cast(torch.bfloat16), *plain_trunk(layout, payload), Cast(torch.float32))
