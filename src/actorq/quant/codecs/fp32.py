"""``quant.bits=32``: the trunk unchanged; the payload is its parameters."""

from __future__ import annotations

import torch

from actorq.quant.codecs._base import Codec, register
from actorq.quant.codecs._parts import float_payload, float_payload_spec, plain_trunk


@register
class Fp32(Codec):
    name = "fp32"
    bits = (32,)
    bits_help = "32 (fp32)"
    full_precision = True
    auto_candidate = True  # the reference every other candidate must beat

    def describe(self, spec):
        return "fp32"

    def payload_spec(self, layout, spec):
        return float_payload_spec(layout, torch.float32)

    def encode(self, trunk, layout, spec, calibration):
        return float_payload(trunk, layout, torch.float32)

    def decode(self, layout, spec, payload):
        return plain_trunk(layout, payload)
