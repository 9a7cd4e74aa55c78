"""``quant.format=int8_static``: every layer in int8, the output layer included, activation
ranges calibrated (torch.ao).

The int8 static recipe up to now; ``quant.bits=8, mode=static`` selects
:mod:`~actorq.quant.codecs.int8_static_fp32_ends` (this one for the layers between the first
and the last, which stay fp32), whose int8 policies keep the fp32 policies' returns.

Runs ``Linear -> [LayerNorm] -> [ReLU]`` blocks: a ReLU right after a Linear is fused into it,
a ReLU after a LayerNorm runs on the quantized tensor. Other activations have no int8 kernel
here and are refused.

A convolutional trunk (:class:`~actorq.quant.module_layout.ModuleLayout`) runs on plain int8
tensors and oneDNN's kernels (:mod:`actorq.quant.plain_conv`) unless ``quant.engine`` names a
torch.ao engine (:func:`actorq.quant.onednn.serves_conv`); then it runs through torch.ao's FX
graph mode (:func:`actorq.quant.conv.quantize_conv_policy`): per-channel
int8 weights, conv+ReLU fused, int8 residual adds; its payload is the converted module's state
as plain tensors, its activation ranges on 8 bits, which the actors load into a module of the
same structure, on 7 bits where their own CPU needs it
(:func:`actorq.quant.conv.reduces_activation_range`).
"""

from __future__ import annotations

import copy
from typing import ClassVar

import torch
from torch import nn

from actorq.util.errors import ConfigError
from actorq.quant import _ao, onednn, plain_codes, plain_conv
from actorq.quant.codecs._base import Codec, register
from actorq.quant.codecs._parts import codes, codes_payload_spec, norm_payload_spec, prefixed
from actorq.quant.conv import quantize_conv_policy, reduces_activation_range
from actorq.quant.layout import ACTIVATIONS, TrunkLayout
from actorq.quant.module_layout import ModuleLayout, plain_state, quantized_weights, restored_state, \
    state_payload_spec

QPARAMS = {"scale": ((1,), torch.float32), "zero_point": ((1,), torch.int32)}


@register
class Int8Static(Codec):
    name = "int8_static"
    bits = (8,)
    modes = ("static",)
    bits_help = "8 (int8)"
    implicit = False  # quant.bits=8 mode=static runs int8_static_fp32_ends
    int8_kernels = True
    calibrated = True
    runs_modules = True
    fp32_ends: ClassVar[bool] = False
    """A convolutional trunk keeps its :func:`~actorq.quant.conv.first_stage` and its
    :func:`~actorq.quant.conv.output_layer` in fp32."""

    def describe(self, spec):
        engine = "" if spec.engine in (None, _ao.DEFAULT_ENGINE) else f" {spec.engine}"
        return f"int8 static {spec.granularity}{engine}"

    def check_layout(self, layout):
        check_static_blocks(layout, range(layout.num_layers))

    def payload_spec(self, layout, spec):
        if isinstance(layout, ModuleLayout) and onednn.serves_conv(spec):
            return plain_conv.payload_spec(layout.architecture, self.fp32_ends, spec.granularity)
        if isinstance(layout, ModuleLayout):
            return state_payload_spec(self._template(layout, spec).state_dict())
        self.check_layout(layout)
        out = prefixed("input_", QPARAMS)
        for k, layer in enumerate(layout.layers):
            out.update(codes_payload_spec(layout, k, spec.granularity == "per_channel"))
            out.update(prefixed(f"l{k}_", QPARAMS))
            if layer.norm:
                out.update(norm_payload_spec(layout, k))
                out.update(prefixed(f"l{k}_norm_", QPARAMS))
        return out

    def encode(self, trunk, layout, spec, calibration):
        if isinstance(layout, ModuleLayout) and onednn.serves_conv(spec):
            return plain_conv.encode(trunk, calibration, self.fp32_ends, spec.granularity, spec.calibration)
        if isinstance(layout, ModuleLayout):  # the 8-bit ranges: each actor re-expresses them for its CPU
            converted = quantize_conv_policy(trunk, calibration, _engine(spec), full_range=True,
                                             observer=spec.calibration, fp32_ends=self.fp32_ends)
            return plain_state(converted.state_dict())
        self.check_layout(layout)
        if onednn.serves(spec):  # the same codes and scales, computed without torch.ao
            return plain_codes.static_payload(trunk, calibration, spec, onednn.activation_max())
        observed = _ao.calibrate_static(trunk, calibration, spec)
        payload = prefixed("input_", _ao.observed_qparams(observed.quant))
        for k, (linear, norm) in enumerate(_ao.observed_layers(observed)):
            payload.update(prefixed(f"l{k}_", _ao.observed_linear(linear)))
            if norm is not None:
                norm_tensors = {**_ao.layer_norm_params(norm), **_ao.observed_qparams(norm)}
                payload.update(prefixed(f"l{k}_norm_", norm_tensors))
        return payload

    def decode(self, layout, spec, payload):
        if isinstance(layout, ModuleLayout) and onednn.serves_conv(spec):
            return plain_conv.decode(layout.architecture, payload, self.fp32_ends)
        if onednn.serves(spec):
            return _decode_plain(layout, payload)
        with _ao.packing_engine(_engine(spec)):
            if isinstance(layout, ModuleLayout):
                module = copy.deepcopy(self._template(layout, spec))
                state = restored_state(module.state_dict(), payload)
                if reduces_activation_range(_engine(spec)):  # this CPU's choice, made here
                    state = _ao.reduced_activation_range(state)
                module.load_state_dict(state)
                return module
            return self._decode(layout, spec, payload)

    def dequantized_weights(self, layout, spec, payload):
        if isinstance(layout, ModuleLayout) and onednn.serves_conv(spec):
            return plain_conv.dequantized_weights(layout.architecture, payload)
        if isinstance(layout, ModuleLayout):
            return quantized_weights(self._template(layout, spec).state_dict(), payload)
        return super().dequantized_weights(layout, spec, payload)

    def _decode(self, layout, spec, payload):
        input_qparams = float(payload["input_scale"]), int(payload["input_zero_point"])
        modules: list[nn.Module] = [_ao.quantize_input(*input_qparams)]
        for k, layer in enumerate(layout.layers):
            fused_relu = layer.activation == "relu" and not layer.norm
            out_qparams = float(payload[f"l{k}_scale"]), int(payload[f"l{k}_zero_point"])
            modules.append(_ao.static_linear(*codes(payload, k), *out_qparams, relu=fused_relu))
            if layer.norm:
                modules.append(
                    _ao.static_layer_norm(
                        payload[f"l{k}_norm_weight"], payload[f"l{k}_norm_bias"], layer.norm_eps,
                        float(payload[f"l{k}_norm_scale"]), int(payload[f"l{k}_norm_zero_point"]),
                    )
                )
                if layer.activation == "relu":
                    modules.append(nn.ReLU())
        modules.append(_ao.dequantize())
        return nn.Sequential(*modules)

    def reference(self, trunk, spec, calibration):
        if isinstance(trunk, nn.Sequential) and not _convolutional(trunk):
            return _ao.convert_static(trunk, calibration, spec)
        if onednn.serves_conv(spec):
            payload = plain_conv.encode(trunk, calibration, self.fp32_ends, spec.granularity, spec.calibration)
            return plain_conv.decode(trunk, payload, self.fp32_ends)
        return quantize_conv_policy(trunk, calibration, _engine(spec), observer=spec.calibration,
                                    fp32_ends=self.fp32_ends)

    def _template(self, layout: ModuleLayout, spec) -> nn.Module:
        """The converted module a convolutional payload is loaded into, for ``spec``'s engine."""
        return layout.int8_template(_engine(spec), self.fp32_ends)


def _decode_plain(layout: TrunkLayout, payload) -> nn.Sequential:
    """The trunk on plain int8 tensors (:mod:`actorq.quant.onednn`), computing what torch.ao's
    quantized modules of :meth:`Int8Static._decode` compute: quantize, each layer from codes to
    codes (ReLU fused, or after the norm), dequantize."""

    def qparams(prefix: str) -> tuple[float, int]:
        return float(payload[f"{prefix}scale"]), int(payload[f"{prefix}zero_point"])

    current = qparams("input_")
    modules: list[nn.Module] = [onednn.Quantize(*current)]
    for k, layer in enumerate(layout.layers):
        weight, scale, zero_point, bias = codes(payload, k)
        out = qparams(f"l{k}_")
        relu = layer.activation == "relu"
        modules.append(onednn.Int8Linear(weight, scale, bias, current, out, relu=relu and not layer.norm,
                                         zero_point=zero_point))
        current = out
        if layer.norm:
            norm_out = qparams(f"l{k}_norm_")
            modules.append(onednn.Int8LayerNorm(payload[f"l{k}_norm_weight"], payload[f"l{k}_norm_bias"],
                                                layer.norm_eps, current, norm_out, relu=relu))
            current = norm_out
    modules.append(onednn.Dequantize(*current))
    return nn.Sequential(*modules)


class Int8StaticConvFp32Ends(Int8Static):
    """A convolutional trunk in int8 but for its first stage and its output layer (not a
    format of its own: :mod:`~actorq.quant.codecs.int8_static_fp32_ends` runs convolutional
    trunks with it)."""

    fp32_ends = True


def _engine(spec) -> str:
    """The torch.ao engine a copy at ``spec`` is packed for (``quant.engine=plain`` runs no
    torch.ao module: the default engine names the learner's reference recipe)."""
    return _ao.DEFAULT_ENGINE if spec.engine in (None, onednn.PLAIN) else spec.engine


def _convolutional(trunk: nn.Module) -> bool:
    return any(isinstance(module, nn.Conv2d) for module in trunk.modules())


def check_static_blocks(layout: TrunkLayout, layers: range) -> None:
    """``ConfigError`` naming the module unless these layers are ``Linear -> [LayerNorm] -> [ReLU]``."""
    for k in layers:
        layer = layout.layers[k]
        if layer.activation not in (None, "relu"):
            index = layout.module_index(k) + 1 + layer.norm
            raise ConfigError(
                f"quant.mode=static runs Linear -> [LayerNorm] -> [ReLU] blocks only; trunk[{index}] is "
                f"{ACTIVATIONS[layer.activation].__name__}: use quant.mode=dynamic, quant.bits=16 or 32"
            )
