"""``quant.bits=2..7`` (``mode=dynamic``): weights rounded to n bits, carried as int8 codes,
dequantized once on the worker and computed in fp32 (a fidelity experiment, as in QuaRL)."""

from __future__ import annotations

import torch

from actorq.quant import plain_codes
from actorq.quant.codecs._base import Codec, register
from actorq.quant.codecs._parts import (
    bias_of,
    dequantize_codes,
    norm_params,
    plain_trunk,
    weight_codes_payload_spec,
)


@register
class Simulated(Codec):
    name = "simulated"
    bits = tuple(range(2, 8))
    modes = ("dynamic",)
    bits_help = "2..7 (simulated)"

    def refusal(self, spec):
        return (
            f"quant.bits={spec.bits} is simulated weight-only quantization and needs quant.mode=dynamic; "
            "quant.mode=static (calibrated activations, real int8 kernels) needs quant.bits=8"
        )

    def describe(self, spec):
        return f"{spec.bits}-bit simulated {spec.granularity}"

    def payload_spec(self, layout, spec):
        return weight_codes_payload_spec(layout, spec.granularity == "per_channel")

    def encode(self, trunk, layout, spec, calibration):
        """Symmetric ``spec.bits``-bit codes of every weight; biases and norms stay fp32."""
        quant_min, quant_max = -(2 ** (spec.bits - 1)), 2 ** (spec.bits - 1) - 1
        payload = {}
        for k, layer in enumerate(layout.layers):
            linear = layout.linear(trunk, k)
            weight = linear.weight.detach().float()
            scale = plain_codes.weight_scale(weight, spec.bits, spec.granularity == "per_channel")
            zero_point = torch.zeros(len(scale), dtype=torch.int32)
            codes = torch.round(weight / scale[:, None])
            payload[f"l{k}_weight"] = codes.clamp(quant_min, quant_max).to(torch.int8)
            payload[f"l{k}_weight_scale"] = scale
            payload[f"l{k}_weight_zero_point"] = zero_point
            payload[f"l{k}_bias"] = bias_of(linear).float().clone()
            if layer.norm:
                payload.update(norm_params(layout.norm(trunk, k), k))
        return payload

    def decode(self, layout, spec, payload):
        weights = [dequantize_codes(payload, k) for k in range(layout.num_layers)]
        return plain_trunk(layout, payload, weights)
