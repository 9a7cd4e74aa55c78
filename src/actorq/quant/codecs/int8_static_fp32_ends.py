"""``quant.bits=8, mode=static`` (the default int8 recipe): the first and the last ``Linear`` of
the trunk in fp32, every layer between them in int8 static.

The two ends are where int8 costs the policy its returns and where it saves the least time:

* The last ``Linear`` writes the values actions are read from: a Q-network's argmax, a
  deterministic actor's pre-``tanh`` action. Quantized, they sit on a 256-step grid over their
  calibrated range (about 0.4 for CartPole's Q-values of 0..100), coarser than the gap between
  two nearly tied Q-values, so greedy actions flip, and ties go to the first action.
* The first ``Linear`` reads the observation. Quantized, all features share one range, set by
  the widest over the calibration sample (cartpole-balance's angular velocity of +-13): near
  the balanced state, where the policy's fine control lives, the whole on-policy spread of
  the angle and the velocities falls into one or two of 128 levels, and the int8 actor
  pushes where the fp32 one holds still.

Both layers are thin (``obs_dim x width`` and ``width x out_features``: 17 x 2048 and 2048 x 6
for the QuaRL actor, against 2048 x 2048 for each hidden one), so running them in fp32 costs
little time. The layers between them run as in :mod:`~actorq.quant.codecs.int8_static`, on
the first layer's fp32 output quantized with calibrated ranges; the last int8 activation uses
the full 8 bits, since it feeds an fp32 ``Linear`` rather than an int8 kernel. A trunk of one
or two ``Linear`` layers has nothing between its ends and runs in fp32.

``quant.format=int8_static`` selects the previous recipe (every layer in int8).

A convolutional trunk runs as :mod:`~actorq.quant.codecs.int8_static` runs it, but for its two
ends (:func:`actorq.quant.conv.fp32_parts`). Its output layer, the last ``Linear`` (DQN's
Q-values, PPO's logits; :func:`actorq.quant.conv.output_layer`), stays fp32 for the reason
an MLP's last layer does. Its first stage stays fp32 where it is a first convolution
followed by a max-pool (IMPALA-CNN's, :func:`actorq.quant.conv.first_stage`): those, and
the pixel scaling before them, where torch's fp32 kernels run them faster than its int8
ones. A first convolution alone (Nature-CNN's) stays int8: its input needs no fp32 end for
range's sake, since every pixel is on the same 0..255 scale (on 7 bits, where the CPU's int8
kernels keep activations to 7, the int8 copy's input loses each pixel's lowest bit).
"""

from __future__ import annotations

import copy
import dataclasses
import re

import torch
from torch import nn

from actorq.quant import _ao, onednn
from actorq.quant.codecs._base import Codec, register
from actorq.quant.codecs._parts import FLOAT32, float_layer, float_layer_spec, layer_modules, plain_linear
from actorq.quant.codecs.int8_static import Int8Static, Int8StaticConvFp32Ends, check_static_blocks
from actorq.quant.layout import TrunkLayout
from actorq.quant.module_layout import ModuleLayout

# The layers between the ends are an int8 static trunk of their own, run by that codec; its
# layer j is layer j + 1 of the whole trunk.
_INT8_STATIC = Int8Static()
_CONV = Int8StaticConvFp32Ends()
_LAYER_NAME = re.compile(r"^l(\d+)_")


@register
class Int8StaticFp32Ends(Codec):
    name = "int8_static_fp32_ends"
    bits = Int8Static.bits
    modes = Int8Static.modes
    bits_help = Int8Static.bits_help
    int8_kernels = True
    calibrated = True
    auto_candidate = True
    runs_modules = True
    middle: Codec = _INT8_STATIC  # the codec of the layers between the ends
    conv: Codec = _CONV  # the codec of a convolutional trunk

    def describe(self, spec):
        engine = "" if spec.engine in (None, _ao.DEFAULT_ENGINE) else f" {spec.engine}"
        return f"int8 {spec.mode} {spec.granularity} fp32-ends{engine}"

    def check_layout(self, layout):
        check_static_blocks(layout, range(1, layout.num_layers - 1))

    def payload_spec(self, layout, spec):
        if isinstance(layout, ModuleLayout):
            return self.conv.payload_spec(layout, spec)
        last = layout.num_layers - 1
        out = float_layer_spec(layout, 0, FLOAT32)
        if _has_middle(layout):
            out.update(_renumbered(self.middle.payload_spec(_middle(layout), spec), +1))
        if last:
            out.update(float_layer_spec(layout, last, FLOAT32))
        return out

    def encode(self, trunk, layout, spec, calibration):
        if isinstance(layout, ModuleLayout):
            return self.conv.encode(trunk, layout, spec, calibration)
        last = layout.num_layers - 1
        payload = float_layer(trunk, layout, 0, FLOAT32)
        if _has_middle(layout):
            middle, features, middle_spec = _split(trunk, layout, spec, calibration)
            payload.update(_renumbered(self.middle.encode(middle, _middle(layout), middle_spec, features), +1))
        if last:
            payload.update(float_layer(trunk, layout, last, FLOAT32))
        return payload

    def decode(self, layout, spec, payload):
        if isinstance(layout, ModuleLayout):
            return self.conv.decode(layout, spec, payload)
        last = layout.num_layers - 1
        modules = _plain_layer(layout, payload, 0)
        if _has_middle(layout):
            middle_payload = _renumbered({k: v for k, v in payload.items() if _in_middle(k, last)}, -1)
            modules.extend(self.middle.decode(_middle(layout), spec, middle_payload))
        if last:
            modules.extend(_plain_layer(layout, payload, last))
        if onednn.serves(spec):  # the fp32 ends quantize and dequantize in their own pass
            modules = onednn.fused_ends(modules)
        return nn.Sequential(*modules)

    def dequantized_weights(self, layout, spec, payload):
        if isinstance(layout, ModuleLayout):
            return self.conv.dequantized_weights(layout, spec, payload)
        return super().dequantized_weights(layout, spec, payload)

    def reference(self, trunk, spec, calibration):
        if any(isinstance(module, nn.Conv2d) for module in trunk.modules()):
            return self.conv.reference(trunk, spec, calibration)
        layout = TrunkLayout.from_trunk(trunk)
        if not _has_middle(layout):
            return copy.deepcopy(trunk)
        middle, features, middle_spec = _split(trunk, layout, spec, calibration)
        first, last = layout.module_index(1), layout.module_index(layout.num_layers - 1)
        return nn.Sequential(
            *copy.deepcopy(trunk[:first]),
            self.middle.reference(middle, middle_spec, features),
            *copy.deepcopy(trunk[last:]),
        )


def _has_middle(layout: TrunkLayout) -> bool:
    return layout.num_layers > 2


def _middle(layout: TrunkLayout) -> TrunkLayout:
    """The layers between the first and the last one."""
    return TrunkLayout(layers=layout.layers[1:-1])


def _split(trunk: nn.Sequential, layout: TrunkLayout, spec, calibration: torch.Tensor | None):
    """``(middle trunk, its calibration inputs, its spec)``: the inputs are the fp32 first
    layer's outputs; a fixed observer's input range becomes that layer's output range."""
    first, last = layout.module_index(1), layout.module_index(layout.num_layers - 1)
    middle = nn.Sequential(*trunk[first:last])
    features = None
    if calibration is not None and len(calibration):
        with torch.no_grad():
            features = trunk[:first](calibration.detach().float().reshape(-1, layout.layers[0].in_features))
    low = 0.0 if layout.has_relu(0) else -spec.activation_max
    return middle, features, dataclasses.replace(spec, input_range=(low, spec.activation_max))


def _plain_layer(layout: TrunkLayout, payload, k: int) -> list[nn.Module]:
    linear = plain_linear(payload[f"l{k}_weight"], payload[f"l{k}_bias"])
    return layer_modules(layout, payload, k, linear)


def _in_middle(name: str, last: int) -> bool:
    match = _LAYER_NAME.match(name)
    return match is None or 0 < int(match.group(1)) < last


def _renumbered(tensors: dict, shift: int) -> dict:
    """``l{k}_...`` -> ``l{k + shift}_...`` (other names unchanged)."""
    return {_LAYER_NAME.sub(lambda m: f"l{int(m.group(1)) + shift}_", name): value for name, value in tensors.items()}
