"""An int8 trunk as plain tensor operations, for ``torch.export``: every layer that calls
oneDNN's int8 kernels (:mod:`actorq.quant.onednn`) replaced by one that computes the same
codes from the same ``torch.int8`` weights with ``torch.nn.functional`` in fp32.

oneDNN's kernels take weights prepacked into an opaque tensor that an ``ExportedProgram``
cannot hold, and have no tracing rule; these layers keep the plain codes and scales as
buffers and dequantize them on the fly, so the exported file stores int8 weights and
reproduces the int8 copy's arithmetic (the same activation codes, up to fp32 rounding of
sums that fall on a rounding boundary) at fp32 speed. The layers without kernels (quantize,
dequantize, max-pool and ReLU on codes, the fp32 ends) are plain operations already and are
kept as they are.

Example:
    >>> _ = torch.manual_seed(0)
    >>> codes, scale = torch.randint(-127, 128, (4, 8), dtype=torch.int8), torch.full((4,), 0.01)
    >>> layer = onednn.Int8Linear(codes, scale, torch.zeros(4), in_qparams=(0.1, 0), out_qparams=None, relu=True)
    >>> x = onednn.quantize(torch.rand(2, 8), 0.1, 0)
    >>> torch.allclose(reference_trunk(nn.Sequential(layer))(x), layer(x), atol=1e-5)
    True
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from actorq.quant import onednn

OUTPUT_MAX = 255
"""The kernels write ``uint8`` codes: a sum beyond the calibrated range saturates at 255."""


def reference_trunk(trunk: nn.Module) -> nn.Module:
    """A copy of ``trunk`` with each oneDNN int8 layer replaced by its plain-operations twin."""
    trunk = copy.deepcopy(trunk)
    _replace_children(trunk)
    return trunk


def _replace_children(module: nn.Module) -> None:
    for name, child in module.named_children():
        twin = _twin(child)
        if twin is None:
            _replace_children(child)
        else:
            setattr(module, name, twin)


def _twin(module: nn.Module) -> nn.Module | None:
    if isinstance(module, onednn.Int8Linear):
        return ReferenceLinear(module)
    if isinstance(module, onednn.Int8Conv2d):
        return ReferenceConv2d(module)
    if isinstance(module, onednn.DynamicInt8Linear):
        return ReferenceDynamicLinear(module)
    return None


def _dequantized(codes: torch.Tensor, scale: float | torch.Tensor, zero_point: float | torch.Tensor) -> torch.Tensor:
    return (codes.to(torch.float32) - zero_point) * scale


def _requantized(x: torch.Tensor, scale: float, zero_point: int) -> torch.Tensor:
    return torch.clamp(torch.round(x / scale) + zero_point, 0, OUTPUT_MAX).to(torch.uint8)


class _Weights(nn.Module):
    """The int8 weight codes, their per-channel scales and the fp32 bias, as buffers."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.register_buffer("weight_codes", layer.weight.contiguous().clone())
        self.register_buffer("weight_scale", layer.weight_scale.clone())
        self.register_buffer("bias", layer.bias.clone())

    def scaled(self, sums: torch.Tensor) -> torch.Tensor:
        """Sums over the codes -> the layer's output: the per-channel scale and the bias, applied
        to the output (channels on dimension 1) rather than to every weight, one pass less."""
        shape = [-1] + [1] * (sums.dim() - 2)
        return sums * self.weight_scale.reshape(shape) + self.bias.reshape(shape)


class ReferenceLinear(_Weights):
    """:class:`~actorq.quant.onednn.Int8Linear`: ``uint8`` codes in, codes or fp32 out."""

    def __init__(self, layer: onednn.Int8Linear):
        super().__init__(layer)
        self.in_qparams = (layer.in_scale, layer.in_zero_point)
        self.out_qparams = None if layer.fp32_out else (layer.out_scale, layer.out_zero_point)
        self.relu = layer.post_op == "relu"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.scaled(F.linear(_dequantized(x, *self.in_qparams), self.weight_codes.to(torch.float32)))
        if self.relu:
            out = torch.relu(out)
        return out if self.out_qparams is None else _requantized(out, *self.out_qparams)


class ReferenceConv2d(_Weights):
    """:class:`~actorq.quant.onednn.Int8Conv2d`: ``uint8`` channels-last codes in and out,
    with the residual sum of :meth:`add_to`."""

    def __init__(self, layer: onednn.Int8Conv2d):
        super().__init__(layer)
        self.stride, self.padding, self.dilation = list(layer.stride), list(layer.padding), list(layer.dilation)
        self.in_qparams = (layer.in_scale, layer.in_zero_point)
        self.out_qparams = (layer.out_scale, layer.out_zero_point)
        self.relu = layer.post_op == "relu"

    def _conv(self, x: torch.Tensor) -> torch.Tensor:
        sums = F.conv2d(_dequantized(x, *self.in_qparams), self.weight_codes.to(torch.float32), None, self.stride,
                        self.padding, self.dilation)
        return self.scaled(sums)

    def _out(self, x: torch.Tensor) -> torch.Tensor:
        if self.relu:
            x = torch.relu(x)
        return _requantized(x, *self.out_qparams).contiguous(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._out(self._conv(x))

    def add_to(self, x: torch.Tensor, residual: torch.Tensor, residual_scale: float,
               residual_zero_point: int) -> torch.Tensor:
        return self._out(self._conv(x) + _dequantized(residual, residual_scale, residual_zero_point))


class ReferenceDynamicLinear(_Weights):
    """:class:`~actorq.quant.onednn.DynamicInt8Linear`: each batch quantized on the range it
    spans (with 0 in it), fp32 in and out."""

    def __init__(self, layer: onednn.DynamicInt8Linear):
        super().__init__(layer.linear)
        self.quant_max = layer.quant_max
        self.relu = layer.linear.post_op == "relu"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low, high = torch.clamp(x.min(), max=0.0), torch.clamp(x.max(), min=0.0)
        scale = torch.clamp((high - low) / self.quant_max, min=1e-8)
        zero_point = torch.floor(-low / scale)  # as onednn.dynamic_qparams and quantize_in_range
        codes = torch.clamp(torch.floor(x / scale + zero_point + 0.5), 0, self.quant_max)
        out = self.scaled(F.linear((codes - zero_point) * scale, self.weight_codes.to(torch.float32)))
        return torch.relu(out) if self.relu else out
