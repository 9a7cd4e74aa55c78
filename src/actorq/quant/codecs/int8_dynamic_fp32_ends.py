"""``quant.bits=8, mode=dynamic``: the first and the last ``Linear`` of the trunk in fp32, every
layer between them int8 with activations quantized over each forward's own range.

The ends stay fp32 for the reasons :mod:`~actorq.quant.codecs.int8_static_fp32_ends` gives.
Between them, a static copy quantizes activations over ranges calibrated on recent
observations, and clips every activation beyond them: when the actors reach states the last
calibration never saw (a cheetah that flips over), its actions collapse onto the clipped range
for as long as they stay there. Dynamic layers measure each forward's range instead, so nothing
is calibrated and nothing saturates, at the same speed (docs/quantization.md measures both).

``quant.format=int8_dynamic`` selects every layer in int8 dynamic.
"""

from __future__ import annotations

from actorq.quant.codecs._base import register
from actorq.quant.codecs.int8_dynamic import Int8Dynamic
from actorq.quant.codecs.int8_static_fp32_ends import Int8StaticFp32Ends


@register
class Int8DynamicFp32Ends(Int8StaticFp32Ends):
    name = "int8_dynamic_fp32_ends"
    modes = Int8Dynamic.modes
    calibrated = False
    auto_candidate = False  # bits=auto times int8_dynamic, as fast; this one is as faithful as static
    runs_modules = False  # convolutions have no dynamic int8 kernels
    middle = Int8Dynamic()

    def check_layout(self, layout):
        self.middle.check_layout(layout)  # dynamic layers take float activations: any kind
