"""``quant.bits=32``: the trunk unchanged; the payload is its parameters (a convolutional
trunk's whole state)."""

from __future__ import annotations

import torch

from actorq.quant.codecs._base import Codec, register
from actorq.quant.codecs._parts import float_payload, float_payload_spec, plain_trunk
from actorq.quant.module_layout import ModuleLayout, plain_state, restored_state, state_payload_spec
from actorq.util.memory_format import set_channels_last


@register
class Fp32(Codec):
    name = "fp32"
    bits = (32,)
    bits_help = "32 (fp32)"
    full_precision = True
    auto_candidate = True  # the reference every other candidate must beat
    runs_modules = True

    def describe(self, spec):
        return "fp32"

    def payload_spec(self, layout, spec):
        if isinstance(layout, ModuleLayout):
            return state_payload_spec(layout.architecture.state_dict())
        return float_payload_spec(layout, torch.float32)

    def encode(self, trunk, layout, spec, calibration):
        if isinstance(layout, ModuleLayout):
            return plain_state(trunk.state_dict())
        return float_payload(trunk, layout, torch.float32)

    def decode(self, layout, spec, payload):
        if isinstance(layout, ModuleLayout):
            module = set_channels_last(layout.fresh(), layout.fp32_channels_last())
            module.load_state_dict(restored_state(module.state_dict(), payload))
            return module
        return plain_trunk(layout, payload)

    def dequantized_weights(self, layout, spec, payload):
        if isinstance(layout, ModuleLayout):
            return layout.weights(self.decode(layout, spec, payload))
        return super().dequantized_weights(layout, spec, payload)
