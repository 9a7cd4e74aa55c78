"""``quant.bits=8, mode=static`` (the default int8 recipe): int8 static everywhere but the
output layer, which stays fp32 (QuaRL's mixed precision).

Actions are read from the trunk's output: a Q-network's argmax, or a deterministic actor's
pre-``tanh`` values. Quantizing that output puts it on a 256-step grid over its calibrated
range (about 0.4 for CartPole's Q-values of 0..100), coarser than the gap between two
nearly tied Q-values, so the int8 policy's greedy actions flip (and ties go to the first
action). Here the hidden layers run as in :mod:`~actorq.quant.codecs.int8_static` (the last
hidden activation with the full 8 bits, since it feeds an fp32 ``Linear`` rather than an int8
kernel), then the output ``Linear`` (with its ``LayerNorm`` and activation, if any) runs in
fp32 on the dequantized features. It is ``out_features x width`` of the trunk's weights (6 x
2048 for the QuaRL actor), so it costs little time. A trunk with a single ``Linear`` has no
int8 layer left and runs in fp32.

``quant.format=int8_static`` selects the previous recipe (the output layer in int8 too).
"""

from __future__ import annotations

import copy

from torch import nn

from actorq.quant import _ao
from actorq.quant.codecs._base import Codec, register
from actorq.quant.codecs._parts import FLOAT32, float_layer, float_layer_spec, layer_modules, plain_linear
from actorq.quant.codecs.int8_static import Int8Static
from actorq.quant.layout import TrunkLayout

# The hidden layers are an int8 static trunk of their own, run by that codec.
_INT8_STATIC = Int8Static()


@register
class Int8StaticFp32Output(Codec):
    name = "int8_static_fp32_output"
    bits = Int8Static.bits
    modes = Int8Static.modes
    bits_help = Int8Static.bits_help
    int8_kernels = True
    calibrated = True

    def describe(self, spec):
        engine = "" if spec.engine in (None, _ao.DEFAULT_ENGINE) else f" {spec.engine}"
        return f"int8 static {spec.granularity} fp32-output{engine}"

    def check_layout(self, layout):
        if layout.num_layers > 1:
            _INT8_STATIC.check_layout(_hidden(layout))

    def payload_spec(self, layout, spec):
        out = _INT8_STATIC.payload_spec(_hidden(layout), spec) if layout.num_layers > 1 else {}
        out.update(float_layer_spec(layout, layout.num_layers - 1, FLOAT32))
        return out

    def encode(self, trunk, layout, spec, calibration):
        last = layout.num_layers - 1
        payload = {}
        if last:
            hidden = nn.Sequential(*trunk[: layout.module_index(last)])
            payload = _INT8_STATIC.encode(hidden, _hidden(layout), spec, calibration)
        payload.update(float_layer(trunk, layout, last, FLOAT32))
        return payload

    def decode(self, layout, spec, payload):
        last = layout.num_layers - 1
        hidden = list(_INT8_STATIC.decode(_hidden(layout), spec, payload)) if last else []
        output = plain_linear(payload[f"l{last}_weight"], payload[f"l{last}_bias"])
        return nn.Sequential(*hidden, *layer_modules(layout, payload, last, output))

    def reference(self, trunk, spec, calibration):
        layout = TrunkLayout.from_trunk(trunk)
        cut = layout.module_index(layout.num_layers - 1)
        hidden = [_INT8_STATIC.reference(nn.Sequential(*trunk[:cut]), spec, calibration)] if cut else []
        return nn.Sequential(*hidden, *copy.deepcopy(trunk[cut:]))


def _hidden(layout: TrunkLayout) -> TrunkLayout:
    """Every layer but the output one."""
    return TrunkLayout(layers=layout.layers[:-1])
