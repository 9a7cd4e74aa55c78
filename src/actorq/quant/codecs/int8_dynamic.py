"""``quant.format=int8_dynamic``: every ``Linear`` int8 weights, activations quantized per batch
(torch.ao's kernels; with ``quant.engine=plain`` oneDNN's on plain int8 tensors,
:mod:`actorq.quant.onednn`). ``quant.bits=8, mode=dynamic`` alone runs
:mod:`~actorq.quant.codecs.int8_dynamic_fp32_ends`."""

from __future__ import annotations

from actorq.quant import _ao, onednn, plain_codes
from actorq.quant.codecs._base import Codec, register
from actorq.quant.codecs._parts import (
    assemble,
    codes,
    norm_params,
    prefixed,
    weight_codes_payload_spec,
)


@register
class Int8Dynamic(Codec):
    name = "int8_dynamic"
    implicit = False  # quant.bits=8 mode=dynamic runs int8_dynamic_fp32_ends
    bits = (8,)
    modes = ("dynamic",)
    bits_help = "8 (int8)"
    int8_kernels = True
    auto_candidate = True

    def describe(self, spec):
        engine = "" if spec.engine in (None, _ao.DEFAULT_ENGINE) else f" {spec.engine}"
        return f"int8 dynamic {spec.granularity}{engine}"

    def payload_spec(self, layout, spec):
        return weight_codes_payload_spec(layout, spec.granularity == "per_channel")

    def encode(self, trunk, layout, spec, calibration):
        if onednn.serves(spec):  # the same codes, computed without torch.ao
            payload = plain_codes.dynamic_payload(trunk, spec.granularity == "per_channel")
            for k in range(layout.num_layers):
                if layout.layers[k].norm:
                    payload.update(norm_params(layout.norm(trunk, k), k))
            return payload
        converted = _ao.convert_dynamic(trunk, spec)
        payload = {}
        for k, (linear, _) in enumerate(_ao.quantized_layers(converted)):
            payload.update(prefixed(f"l{k}_", _ao.linear_codes(linear)))
            if layout.layers[k].norm:  # LayerNorm stays fp32 in a dynamic trunk
                payload.update(norm_params(layout.norm(trunk, k), k))
        return payload

    def decode(self, layout, spec, payload):
        if onednn.serves(spec):
            return assemble(layout, payload, lambda k: onednn.DynamicInt8Linear(*codes(payload, k)))
        with _ao.packing_engine(spec.engine or _ao.DEFAULT_ENGINE):
            return self._decode(layout, spec, payload)

    def _decode(self, layout, spec, payload):
        return assemble(layout, payload, lambda k: _ao.dynamic_linear(*codes(payload, k)))

    def reference(self, trunk, spec, calibration):
        return _ao.convert_dynamic(trunk, spec)
