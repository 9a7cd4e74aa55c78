"""The one place that touches ``torch.ao`` (deprecated upstream in favour of torchao).

Everything else in :mod:`actorq.quant` sees plain tensors and ``nn.Module`` objects, so
swapping the backend means rewriting this file only. Two halves:

* learner side: eager-mode post-training quantization (``prepare``/``convert`` with the
  observers a :class:`~actorq.quant.spec.QuantSpec` names, or ``quantize_dynamic``);
* worker side: quantized modules rebuilt from plain ``int8`` codes and float scales.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import torch
from torch import nn

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import torch.ao.nn.intrinsic as nni
    import torch.ao.nn.intrinsic.quantized as nniq
    import torch.ao.nn.quantized as nnq
    import torch.ao.nn.quantized.dynamic as nnqd
    import torch.ao.quantization as tq
    from torch.ao.quantization import observer as tqo

# The deprecation is known and contained in this module; actors would otherwise print it in
# every worker process on the first quantized forward.
warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor, torch\.quantize_per_channel")
warnings.filterwarnings(
    "ignore", message=r".*torch\.ao\.quantization.*deprecated", category=DeprecationWarning
)

ACTIVATION_DTYPE = torch.quint8
WEIGHT_DTYPE = torch.qint8
# x86/fbgemm kernels may saturate 16-bit accumulators with full-range uint8 inputs, so
# activations that feed a Linear use 7 bits (torch's own x86 default does the same).
REDUCED_ACTIVATION_MAX = 127
FULL_ACTIVATION_MAX = 255

_LEARNED_OBSERVERS: dict[str, type] = {
    "minmax": tqo.MinMaxObserver,
    "moving_average": tqo.MovingAverageMinMaxObserver,
    "histogram": tqo.HistogramObserver,
}


# ---------------------------------------------------------------------------- observers


def weight_qparams(weight: torch.Tensor, bits: int, per_channel: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric ``bits``-bit scales and zero points for a ``[out, in]`` weight.

    Returns:
        ``(scale, zero_point)``: float32 and int32 tensors of shape ``[out]`` (per channel)
        or ``[1]`` (per tensor).
    """
    quant_min, quant_max = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if per_channel:
        observer = tqo.PerChannelMinMaxObserver(
            ch_axis=0, dtype=WEIGHT_DTYPE, qscheme=torch.per_channel_symmetric,
            quant_min=quant_min, quant_max=quant_max,
        )
    else:
        observer = tqo.MinMaxObserver(
            dtype=WEIGHT_DTYPE, qscheme=torch.per_tensor_symmetric,
            quant_min=quant_min, quant_max=quant_max,
        )
    observer(weight.detach().float())
    scale, zero_point = observer.calculate_qparams()
    return scale.float().reshape(-1), zero_point.to(torch.int32).reshape(-1)


def _weight_observer(per_channel: bool) -> Callable[[], nn.Module]:
    if per_channel:
        return tqo.PerChannelMinMaxObserver.with_args(
            ch_axis=0, dtype=WEIGHT_DTYPE, qscheme=torch.per_channel_symmetric
        )
    return tqo.MinMaxObserver.with_args(dtype=WEIGHT_DTYPE, qscheme=torch.per_tensor_symmetric)


def _learned_observer(calibration: str, feeds_linear: bool) -> Callable[[], nn.Module]:
    return _LEARNED_OBSERVERS[calibration].with_args(
        dtype=ACTIVATION_DTYPE, reduce_range=feeds_linear
    )


def _fixed_observer(low: float, high: float, feeds_linear: bool) -> Callable[[], nn.Module]:
    quant_max = REDUCED_ACTIVATION_MAX if feeds_linear else FULL_ACTIVATION_MAX
    low, high = min(low, 0.0), max(high, 0.0)
    scale = (high - low) / quant_max
    zero_point = int(round(-low / scale))
    return tqo.FixedQParamsObserver.with_args(
        scale=scale, zero_point=zero_point, dtype=ACTIVATION_DTYPE, quant_min=0, quant_max=quant_max
    )


# ---------------------------------------------------------------------------- learner side


class _Staged(nn.Module):
    """``QuantStub -> trunk -> DeQuantStub``: the shape eager-mode PTQ expects."""

    def __init__(self, trunk: nn.Sequential):
        super().__init__()
        self.quant = tq.QuantStub()
        self.trunk = trunk
        self.dequant = tq.DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dequant(self.trunk(self.quant(x)))


def fusable_pairs(trunk: nn.Sequential) -> list[list[str]]:
    """``[["0", "1"], ...]``: every ``Linear`` directly followed by a ``ReLU``."""
    children = list(trunk)
    return [
        [str(i), str(i + 1)]
        for i in range(len(children) - 1)
        if isinstance(children[i], nn.Linear) and isinstance(children[i + 1], nn.ReLU)
    ]


def convert_static(
    trunk: nn.Sequential,
    calibration: torch.Tensor | None,
    *,
    per_channel: bool,
    observer: str,
    calibration_kind: str,
    input_range: tuple[float, float],
    activation_max: float,
    chunks: int = 8,
) -> nn.Module:
    """Eager-mode static PTQ of a copy of ``trunk``: fuse, observe, calibrate, convert.

    Returns:
        The converted module; ``.quant`` is a quantize module with the input qparams and
        ``.trunk`` holds ``LinearReLU``/``Linear``/``LayerNorm`` quantized modules.
    """
    staged = _Staged(copy.deepcopy(trunk)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pairs = fusable_pairs(staged.trunk)
        if pairs:
            staged.trunk = tq.fuse_modules(staged.trunk, pairs)
        _assign_qconfigs(staged, per_channel, observer, calibration_kind, input_range, activation_max)
        prepared = tq.prepare(staged)
        with torch.no_grad():
            for part in _calibration_chunks(calibration, input_range, staged, chunks):
                prepared(part)
        return tq.convert(prepared)


def _assign_qconfigs(
    staged: _Staged,
    per_channel: bool,
    observer: str,
    calibration_kind: str,
    input_range: tuple[float, float],
    activation_max: float,
) -> None:
    weight = _weight_observer(per_channel)
    layers = list(staged.trunk)
    last = max(i for i, m in enumerate(layers) if isinstance(m, (nn.Linear, nni.LinearReLU)))

    def qconfig(low: float, high: float, feeds_linear: bool) -> tq.QConfig:
        if observer == "fixed":
            return tq.QConfig(activation=_fixed_observer(low, high, feeds_linear), weight=weight)
        return tq.QConfig(activation=_learned_observer(calibration_kind, feeds_linear), weight=weight)

    staged.qconfig = qconfig(-activation_max, activation_max, True)
    staged.quant.qconfig = qconfig(*input_range, True)
    for i, module in enumerate(layers):
        if isinstance(module, nni.LinearReLU):
            module.qconfig = qconfig(0.0, activation_max, True)
        elif i == last:
            module.qconfig = qconfig(-activation_max, activation_max, False)


def _calibration_chunks(
    calibration: torch.Tensor | None,
    input_range: tuple[float, float],
    staged: _Staged,
    chunks: int,
) -> list[torch.Tensor]:
    if calibration is None or len(calibration) == 0:
        # Fixed observers ignore the values; the pass only has to run once.
        in_features = next(m for m in staged.trunk.modules() if isinstance(m, nn.Linear)).in_features
        calibration = torch.empty(2, in_features).uniform_(*input_range)
    calibration = calibration.detach().float().reshape(-1, calibration.shape[-1])
    return list(torch.chunk(calibration, min(chunks, len(calibration))))


def convert_dynamic(trunk: nn.Sequential, *, per_channel: bool) -> nn.Module:
    """``quantize_dynamic`` of a copy of ``trunk``: its ``Linear`` layers become int8."""
    qconfig = tq.per_channel_dynamic_qconfig if per_channel else tq.default_dynamic_qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tq.quantize_dynamic(copy.deepcopy(trunk).eval(), {nn.Linear: qconfig}, dtype=WEIGHT_DTYPE)


def is_quantized_linear(module: nn.Module) -> bool:
    return isinstance(module, (nnq.Linear, nnqd.Linear))


def is_quantized_layer_norm(module: nn.Module) -> bool:
    return isinstance(module, nnq.LayerNorm)


def linear_codes(module: nn.Module) -> dict[str, torch.Tensor]:
    """The int8 weight codes, scales, zero points and fp32 bias of a quantized ``Linear``."""
    weight, bias = module._weight_bias()  # one unpack of the packed params, not two
    if weight.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
        scale = weight.q_per_channel_scales()
        zero_point = weight.q_per_channel_zero_points()
    else:
        scale = torch.tensor([weight.q_scale()])
        zero_point = torch.tensor([weight.q_zero_point()])
    return {
        "weight": weight.int_repr().clone(),
        "weight_scale": scale.float().reshape(-1),
        "weight_zero_point": zero_point.to(torch.int32).reshape(-1),
        "bias": bias.detach().float().clone(),
    }


def output_qparams(module: nn.Module) -> dict[str, torch.Tensor]:
    """The output scale and zero point of a statically quantized module."""
    return {
        "scale": torch.tensor([float(module.scale)]),
        "zero_point": torch.tensor([int(module.zero_point)], dtype=torch.int32),
    }


def input_qparams(converted: nn.Module) -> dict[str, torch.Tensor]:
    """The input scale and zero point of a module made by :func:`convert_static`."""
    return {
        "scale": converted.quant.scale.detach().float().reshape(1).clone(),
        "zero_point": converted.quant.zero_point.detach().to(torch.int32).reshape(1).clone(),
    }


# ---------------------------------------------------------------------------- worker side


def quantized_weight(codes: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor) -> torch.Tensor:
    """A ``qint8`` tensor wrapping plain int8 codes with their scales and zero points."""
    if scale.numel() == 1:
        return torch._make_per_tensor_quantized_tensor(codes, float(scale), int(zero_point))
    return torch._make_per_channel_quantized_tensor(codes, scale.double(), zero_point.to(torch.int64), 0)


def _with_weight(cls: type, codes: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor,
                 bias: torch.Tensor, **kwargs) -> nn.Module:
    out_features, in_features = codes.shape
    # Built 1x1 first: the constructor would otherwise pack a full-size zero matrix that
    # set_weight_bias immediately replaces (tens of ms at width 2048, on every push).
    module = cls(1, 1, **kwargs)
    module.set_weight_bias(quantized_weight(codes, scale, zero_point), bias.float())
    module.in_features, module.out_features = in_features, out_features
    return module


def static_linear(
    codes: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor,
    bias: torch.Tensor,
    out_scale: float,
    out_zero_point: int,
    relu: bool,
) -> nn.Module:
    """A quantized ``Linear`` (or fused ``LinearReLU``) with quint8 input and output."""
    module = _with_weight(nniq.LinearReLU if relu else nnq.Linear, codes, scale, zero_point, bias)
    module.scale = float(out_scale)
    module.zero_point = int(out_zero_point)
    return module


def dynamic_linear(
    codes: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, bias: torch.Tensor
) -> nn.Module:
    """A dynamically quantized ``Linear``: int8 weights, fp32 in and out."""
    return _with_weight(nnqd.Linear, codes, scale, zero_point, bias, dtype=WEIGHT_DTYPE)


def static_layer_norm(
    weight: torch.Tensor, bias: torch.Tensor, eps: float, out_scale: float, out_zero_point: int
) -> nn.Module:
    """A quantized ``LayerNorm`` over the last dimension."""
    return nnq.LayerNorm(
        weight.shape[0],
        nn.Parameter(weight.float().clone(), requires_grad=False),
        nn.Parameter(bias.float().clone(), requires_grad=False),
        float(out_scale),
        int(out_zero_point),
        eps=eps,
    )


def quantize_input(scale: float, zero_point: int) -> nn.Module:
    """fp32 -> quint8 with fixed qparams."""
    return nnq.Quantize(float(scale), int(zero_point), ACTIVATION_DTYPE)


def dequantize() -> nn.Module:
    return nnq.DeQuantize()
