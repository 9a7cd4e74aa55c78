"""Int8 layers on plain tensors: ``torch.int8`` weight codes, ``torch.uint8`` activations and
explicit float scales and integer zero points, computed by oneDNN's int8 matmul
(``torch.ops.onednn.qlinear_pointwise``, the kernel Inductor lowers an int8 ``Linear`` to).

No tensor here has a quantized dtype (``torch.qint8``/``torch.quint8``, which PyTorch is
removing with ``torch.ao.quantization``), and nothing is compiled: a new version's weights
are prepacked for the kernel when an actor builds it (:class:`Int8Linear`). With ``quant.engine=plain`` the MLP codecs
(:mod:`actorq.quant.codecs.int8_static`, :mod:`~actorq.quant.codecs.int8_dynamic` and their
fp32-ends recipes) build their actors' trunks from these layers, and ``quant.bits=auto``
times them beside torch.ao's engines; the payloads are the same plain codes either way.

Every layer scripts and saves with TorchScript (``actorq export``): a prepacked weight does not
serialize, so a layer saves its plain codes and packs them again when it is loaded.

Example:
    >>> _ = torch.manual_seed(0)
    >>> codes, scale = torch.randint(-127, 128, (4, 8), dtype=torch.int8), torch.full((4,), 0.01)
    >>> layer = Int8Linear(codes, scale, torch.zeros(4), in_qparams=(0.1, 0), out_qparams=None, relu=False)
    >>> x = torch.rand(2, 8)
    >>> exact = quantize(x, 0.1, 0).float() * 0.1 @ (codes.float() * 0.01).t()
    >>> torch.allclose(layer(quantize(x, 0.1, 0)), exact, atol=1e-5)
    True
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from actorq.quant import _ao_present

ACTIVATION_MAX = 255
"""The largest activation code: activations are ``torch.uint8``, all 8 bits, unless the
CPU's int8 kernel would saturate their sums (:func:`saturates_full_range`): then 127."""
REDUCED_ACTIVATION_MAX = 127


def available() -> bool:
    """Whether this torch build has oneDNN's int8 matmul (``torch.ops.onednn.qlinear_pointwise``)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.onednn, "qlinear_pointwise")


PLAIN = "plain"
"""The ``quant.engine`` that runs int8 actors on plain tensors: an MLP's on these layers, a
convolutional trunk's on :mod:`actorq.quant.plain_conv`'s."""


def engines() -> tuple[str, ...]:
    """The ``quant.engine`` names this module adds to torch.ao's: ``plain`` where torch has the kernels."""
    return (PLAIN,) if available() else ()


def serves(spec) -> bool:
    """Whether an MLP copy at ``spec`` runs on these layers: ``quant.engine=plain``, or no engine
    named in a torch without torch.ao's quantized engines, where torch has the kernels (any
    other engine, or none, runs torch.ao's quantized modules: on an MLP they are faster,
    docs/measured/quantization.md)."""
    engine = spec.engine if spec.engine is not None else default_engine(convolutional=False)
    return engine == PLAIN and available()


def serves_conv(spec) -> bool:
    """Whether a convolutional copy at ``spec`` runs on plain int8 tensors
    (:mod:`actorq.quant.plain_conv`): ``quant.engine=plain``, or no engine named, where torch
    has the kernels (on both pixel trunks they ran faster than torch.ao's engines, with a
    cheaper push: docs/measured/pixels.md); a torch.ao engine named runs its modules."""
    return spec.engine in (None, PLAIN) and available()


def default_engine(convolutional: bool) -> str | None:
    """The engine ``quant.engine=null`` runs: :data:`PLAIN` for a convolutional trunk where torch
    has the kernels, and for an MLP where torch has no torch.ao quantized engine left; else
    ``None`` (torch.ao's default engine)."""
    return PLAIN if available() and (convolutional or not _ao_present.ENGINES) else None


def codes_of(x: torch.Tensor) -> torch.Tensor:
    """Floats already in ``0..255`` (integral, or to be truncated) as ``uint8``, cast through
    ``int16``: torch's direct ``float32 -> uint8`` cast is a slower loop (9 µs on a 16x2048
    batch against 2 + 2 µs for the two casts, AVX-512 CPU, one thread)."""
    return x.to(torch.int16).to(torch.uint8)


def quantize(x: torch.Tensor, scale: float, zero_point: int, quant_max: int = ACTIVATION_MAX) -> torch.Tensor:
    """``x`` as ``uint8`` codes: ``round(x / scale) + zero_point``, clamped to ``0..quant_max``."""
    return codes_of(torch.clamp(torch.round(x / scale) + zero_point, 0, quant_max))


def dynamic_qparams(x: torch.Tensor, quant_max: int) -> tuple[float, int]:
    """The ``(scale, zero_point)`` that map the range ``x`` spans (with 0 in it) onto codes
    ``0..quant_max``, the zero point rounded down (what :func:`quantize_in_range` needs)."""
    low, high = torch.aminmax(x)  # one pass; the scale and zero point are then Python numbers
    low, high = min(float(low), 0.0), max(float(high), 0.0)
    scale = max((high - low) / quant_max, 1e-8)
    return scale, int(math.floor(-low / scale))


def quantize_in_range(x: torch.Tensor, scale: float, zero_point: int) -> torch.Tensor:
    """``x`` as ``uint8`` codes, rounded half up, for ``x`` inside the range
    :func:`dynamic_qparams` took the scale and zero point from: ``x / scale + zero_point +
    0.5`` then lies in ``[-0.5, quant_max + 0.5]`` (the zero point rounded down), so the
    truncating cast to ``uint8`` is the rounding and the clamp: one pass where dividing,
    rounding, adding, clamping and casting took five (the cast is :func:`codes_of`'s)."""
    return codes_of(torch.add(torch.scalar_tensor(zero_point + 0.5), x, alpha=1.0 / scale))


def nonnegative_qparams(x: torch.Tensor, quant_max: int) -> tuple[float, int]:
    """:func:`dynamic_qparams` of an ``x`` with no negative value (a ReLU's output): the same
    numbers (the zero point is 0) from its largest value alone, half the reading."""
    return max(max(float(x.amax()), 0.0) / quant_max, 1e-8), 0


def dequantize(codes: torch.Tensor, scale: float, zero_point: int) -> torch.Tensor:
    """``uint8`` codes as floats: ``(codes - zero_point) * scale``."""
    return (codes.to(torch.float32) - zero_point) * scale


@functools.cache
def saturates_full_range() -> bool:
    """Whether the int8 matmul loses sums of full-range (8-bit) activations on this CPU,
    measured once per process: kernels without AVX-512 VNNI or AMX multiply pairs of inputs
    into 16-bit sums that saturate, so activations keep 7 bits there; with them all 8."""
    if not available():
        return True
    width, code = 64, 127
    layer = Int8Linear(torch.full((1, width), code, dtype=torch.int8), torch.ones(1), torch.zeros(1),
                       in_qparams=(1.0, 0), out_qparams=None, relu=False)
    out = float(layer(torch.full((1, width), ACTIVATION_MAX, dtype=torch.uint8)))
    return out != ACTIVATION_MAX * code * width


def activation_max() -> int:
    """The largest activation code the int8 layers take on this CPU (:func:`saturates_full_range`)."""
    return REDUCED_ACTIVATION_MAX if saturates_full_range() else ACTIVATION_MAX


class Quantize(nn.Module):
    """fp32 -> ``uint8`` codes with fixed ``scale`` and ``zero_point``."""

    def __init__(self, scale: float, zero_point: int, quant_max: int = ACTIVATION_MAX):
        super().__init__()
        self.scale, self.zero_point, self.quant_max = float(scale), int(zero_point), int(quant_max)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return quantize(x, self.scale, self.zero_point, self.quant_max)

    def extra_repr(self) -> str:
        return f"scale={self.scale:.4g}, zero_point={self.zero_point}, quant_max={self.quant_max}"


class Dequantize(nn.Module):
    """``uint8`` codes -> fp32."""

    def __init__(self, scale: float, zero_point: int):
        super().__init__()
        self.scale, self.zero_point = float(scale), int(zero_point)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.to(torch.float32) - self.zero_point) * self.scale


class Int8Linear(nn.Module):
    """``uint8`` activations x ``int8`` weights (symmetric, per channel or per tensor) + fp32
    bias, with a fused ReLU, out as ``uint8`` codes (``out_qparams``) or fp32 (``None``).

    Args:
        codes: ``[out, in]`` int8 weight codes.
        scale: ``[out]`` or ``[1]`` float weight scales.
        bias: ``[out]`` float bias.
        in_qparams: the input codes' ``(scale, zero_point)``.
        out_qparams: the output codes' ``(scale, zero_point)``; ``None``: fp32 out.
        relu: ReLU fused into the kernel.
        zero_point: the weight codes' zero points, if given: all 0 (symmetric weights).
    """

    def __init__(self, codes: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor,
                 in_qparams: tuple[float, int], out_qparams: tuple[float, int] | None, relu: bool,
                 zero_point: torch.Tensor | None = None):
        super().__init__()
        if codes.dtype != torch.int8 or codes.dim() != 2:
            raise ValueError(f"weight codes must be a 2-D int8 tensor, got {codes.dtype} {tuple(codes.shape)}")
        if zero_point is not None and bool((zero_point != 0).any()):
            raise ValueError("the int8 kernels take symmetric weights (zero points 0)")
        self.weight = codes.contiguous()
        self.weight_scale = scale.detach().to(torch.float32).reshape(-1).contiguous()
        self.weight_zero_point = torch.zeros(self.weight_scale.numel(), dtype=torch.int32)
        self.bias = bias.detach().to(torch.float32).contiguous()
        self.in_scale, self.in_zero_point = float(in_qparams[0]), int(in_qparams[1])
        self.fp32_out = out_qparams is None
        self.out_scale, self.out_zero_point = (1.0, 0) if out_qparams is None else (float(out_qparams[0]),
                                                                                    int(out_qparams[1]))
        self.post_op = "relu" if relu else "none"
        self.packed = torch.ops.onednn.qlinear_prepack(self.weight, None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype: Optional[torch.dtype] = torch.float32 if self.fp32_out else torch.uint8
        return torch.ops.onednn.qlinear_pointwise(
            x, self.in_scale, self.in_zero_point, self.packed, self.weight_scale, self.weight_zero_point, self.bias,
            self.out_scale, self.out_zero_point, dtype, self.post_op, [], "")

    @torch.jit.export
    def __getstate__(self):
        # The prepacked weight does not serialize: the plain codes do, and are packed again.
        return (self.weight, self.weight_scale, self.weight_zero_point, self.bias, self.in_scale, self.in_zero_point,
                self.out_scale, self.out_zero_point, self.fp32_out, self.post_op, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float, int, float,
                                        int, bool, str, bool]):
        self.weight, self.weight_scale, self.weight_zero_point, self.bias = state[0], state[1], state[2], state[3]
        self.in_scale, self.in_zero_point, self.out_scale, self.out_zero_point = state[4], state[5], state[6], state[7]
        self.fp32_out, self.post_op, self.training = state[8], state[9], state[10]
        self.packed = torch.ops.onednn.qlinear_prepack(self.weight, None)

    @torch.jit.unused
    def __deepcopy__(self, memo):
        return Int8Linear(self.weight.clone(), self.weight_scale.clone(), self.bias.clone(),
                          (self.in_scale, self.in_zero_point),
                          None if self.fp32_out else (self.out_scale, self.out_zero_point), self.post_op == "relu")

    def extra_repr(self) -> str:
        out = "fp32" if self.fp32_out else f"uint8 scale={self.out_scale:.4g}"
        return f"in={self.weight.shape[1]}, out={self.weight.shape[0]}, {out}, relu={self.post_op == 'relu'}"


class Int8Conv2d(nn.Module):
    """A 2-D convolution on ``uint8`` channels-last activations with ``int8`` weights
    (symmetric, per output channel) and an fp32 bias, ReLU fused or not, out as ``uint8`` codes
    (``torch.ops.onednn.qconv2d_pointwise``). :meth:`add_to` adds a residual inside the kernel.

    Args:
        codes: ``[out, in, kh, kw]`` int8 weight codes.
        scale: ``[out]`` float weight scales.
        bias: ``[out]`` float bias.
        conv: the fp32 ``Conv2d`` whose stride, padding and dilation it takes.
        in_qparams: the input codes' ``(scale, zero_point)``.
        out_qparams: the output codes' ``(scale, zero_point)``.
        relu: ReLU fused into the kernel.
    """

    def __init__(self, codes: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, conv: nn.Conv2d,
                 in_qparams: tuple[float, int], out_qparams: tuple[float, int], relu: bool):
        super().__init__()
        if codes.dtype != torch.int8 or codes.dim() != 4:
            raise ValueError(f"weight codes must be a 4-D int8 tensor, got {codes.dtype} {tuple(codes.shape)}")
        if conv.groups != 1 or isinstance(conv.padding, str):
            raise ValueError("Int8Conv2d takes ungrouped convolutions with numeric padding")
        self.weight = codes.contiguous(memory_format=torch.channels_last)
        self.weight_scale = scale.detach().to(torch.float32).reshape(-1).contiguous()
        self.weight_zero_point = torch.zeros(self.weight_scale.numel(), dtype=torch.int32)
        self.bias = bias.detach().to(torch.float32).contiguous()
        self.stride, self.padding, self.dilation = list(conv.stride), list(conv.padding), list(conv.dilation)
        self.in_scale, self.in_zero_point = float(in_qparams[0]), int(in_qparams[1])
        self.out_scale, self.out_zero_point = float(out_qparams[0]), int(out_qparams[1])
        self.post_op = "relu" if relu else "none"
        self.packed = self._pack()

    def _pack(self) -> torch.Tensor:
        return torch.ops.onednn.qconv_prepack(self.weight, self.weight_scale, self.in_scale, self.in_zero_point,
                                              self.stride, self.padding, self.dilation, 1, None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.onednn.qconv2d_pointwise(
            x, self.in_scale, self.in_zero_point, self.packed, self.weight_scale, self.weight_zero_point, self.bias,
            self.stride, self.padding, self.dilation, 1, self.out_scale, self.out_zero_point, torch.uint8, self.post_op,
            [], "")

    @torch.jit.export
    def add_to(self, x: torch.Tensor, residual: torch.Tensor, residual_scale: float,
               residual_zero_point: int) -> torch.Tensor:
        """``conv(x) + residual`` (``residual`` codes at their own scale and zero point) as
        codes, the sum taken inside the kernel (oneDNN's binary post-op)."""
        return torch.ops.onednn.qconv2d_pointwise(  # the .binary overload, chosen by its arguments
            x, self.in_scale, self.in_zero_point, self.packed, self.weight_scale, self.weight_zero_point,
            residual.clone(), self.bias, self.stride, self.padding, self.dilation, 1, self.out_scale,
            self.out_zero_point, torch.uint8, residual_scale, residual_zero_point, "sum", 1.0, self.post_op, [], "")

    @torch.jit.export
    def __getstate__(self):
        # The prepacked weight does not serialize: the plain codes do, and are packed again.
        return (self.weight, self.weight_scale, self.weight_zero_point, self.bias, self.stride, self.padding,
                self.dilation, self.in_scale, self.in_zero_point, self.out_scale, self.out_zero_point, self.post_op,
                self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[int], list[int],
                                        list[int], float, int, float, int, str, bool]):
        self.weight, self.weight_scale, self.weight_zero_point, self.bias = state[0], state[1], state[2], state[3]
        self.stride, self.padding, self.dilation = state[4], state[5], state[6]
        self.in_scale, self.in_zero_point, self.out_scale, self.out_zero_point = state[7], state[8], state[9], state[10]
        self.post_op, self.training = state[11], state[12]
        self.packed = self._pack()

    def extra_repr(self) -> str:
        return (f"{self.weight.shape[1]}, {self.weight.shape[0]}, kernel={tuple(self.weight.shape[2:])}, "
                f"stride={tuple(self.stride)}, relu={self.post_op == 'relu'}")


class DynamicInt8Linear(nn.Module):
    """fp32 in and out: each batch's activations quantized on the range they span (with 0 in
    it), on all 8 bits where :func:`saturates_full_range` allows, then :class:`Int8Linear`'s
    kernel, with a fused ReLU if ``relu``. ``nonnegative_input``: the layer reads a ReLU's
    output, so the range is found from the largest value alone (:func:`nonnegative_qparams`)."""

    def __init__(self, codes: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None, bias: torch.Tensor,
                 relu: bool = False, nonnegative_input: bool = False):
        super().__init__()
        self.linear = Int8Linear(codes, scale, bias, in_qparams=(1.0, 0), out_qparams=None, relu=relu,
                                 zero_point=zero_point)
        self.quant_max = activation_max()
        self.nonnegative_input = bool(nonnegative_input)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.nonnegative_input:
            scale, zero_point = nonnegative_qparams(x, self.quant_max)
        else:
            scale, zero_point = dynamic_qparams(x, self.quant_max)
        codes = quantize_in_range(x, scale, zero_point)
        linear = self.linear
        return torch.ops.onednn.qlinear_pointwise(
            codes, scale, zero_point, linear.packed, linear.weight_scale, linear.weight_zero_point, linear.bias,
            1.0, 0, torch.float32, linear.post_op, [], "")

    def fused(self, relu: bool, nonnegative_input: bool) -> DynamicInt8Linear:
        """The same layer with a ReLU fused into its kernel (``relu``), or reading a ReLU's output."""
        linear = self.linear
        return DynamicInt8Linear(linear.weight, linear.weight_scale, None, linear.bias,
                                 relu=relu or linear.post_op == "relu",
                                 nonnegative_input=nonnegative_input or self.nonnegative_input)

    def extra_repr(self) -> str:
        return "input >= 0" if self.nonnegative_input else ""


class Int8LayerNorm(nn.Module):
    """``uint8`` codes -> ``LayerNorm`` over the last dimension in fp32 (-> ReLU) -> ``uint8`` codes."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, eps: float, in_qparams: tuple[float, int],
                 out_qparams: tuple[float, int], relu: bool, quant_max: int = ACTIVATION_MAX):
        super().__init__()
        self.weight, self.bias = weight.detach().float().clone(), bias.detach().float().clone()
        self.eps, self.relu, self.quant_max = float(eps), bool(relu), int(quant_max)
        self.in_scale, self.in_zero_point = float(in_qparams[0]), int(in_qparams[1])
        self.out_scale, self.out_zero_point = float(out_qparams[0]), int(out_qparams[1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = (x.to(torch.float32) - self.in_zero_point) * self.in_scale
        normed = F.layer_norm(features, (self.weight.shape[0],), self.weight, self.bias, self.eps)
        if self.relu:
            normed = torch.relu(normed)
        return quantize(normed, self.out_scale, self.out_zero_point, self.quant_max)


class LinearToCodes(nn.Module):
    """An fp32 ``Linear`` (-> ReLU) whose output :class:`Quantize` takes, in one pass: the
    quantization's ``1 / scale`` and zero point are folded into the weight and bias, and the
    clamp to the codes' range is the ReLU (``round(relu(W x + b) / s) + z`` is
    ``clamp(round((W / s) x + b / s + z), z, quant_max)``). Three elementwise passes where the
    unfused modules take six."""

    def __init__(self, linear: nn.Linear, relu: bool, quantize: Quantize):
        super().__init__()
        self.weight = linear.weight.detach().float() / quantize.scale
        bias = linear.bias.detach().float() if linear.bias is not None else torch.zeros(linear.out_features)
        self.bias = bias / quantize.scale + quantize.zero_point
        self.low, self.high = float(quantize.zero_point if relu else 0), float(quantize.quant_max)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return codes_of(F.linear(x, self.weight, self.bias).round_().clamp_(self.low, self.high))

    def extra_repr(self) -> str:
        return f"in={self.weight.shape[1]}, out={self.weight.shape[0]}, codes in [{self.low:g}, {self.high:g}]"


class CodesToLinear(nn.Module):
    """``uint8`` codes that :class:`Dequantize` would turn into an fp32 ``Linear``'s input, in one
    pass: the scale and zero point folded into the weight and bias
    (``W ((c - z) s) + b`` is ``(W s) c + (b - z W s 1)``)."""

    def __init__(self, dequantize: Dequantize, linear: nn.Linear):
        super().__init__()
        self.weight = linear.weight.detach().float() * dequantize.scale
        bias = linear.bias.detach().float() if linear.bias is not None else torch.zeros(linear.out_features)
        self.bias = bias - dequantize.zero_point * self.weight.sum(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(torch.float32), self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in={self.weight.shape[1]}, out={self.weight.shape[0]}"


def fused_ends(modules: list[nn.Module]) -> list[nn.Module]:
    """``modules`` with each fp32 ``Linear`` (-> ``ReLU``) -> :class:`Quantize` run as one
    :class:`LinearToCodes`, each :class:`Dequantize` of codes with zero point 0 (a ReLU's)
    -> ``Linear`` as one :class:`CodesToLinear` (an MLP's fp32 ends around its int8 layers),
    and each :class:`DynamicInt8Linear` -> ``ReLU`` as the layer with the ReLU in its kernel
    (one reading a ReLU's output knows its input is not negative); the rest as given."""
    out: list[nn.Module] = []
    i = 0
    while i < len(modules):
        module = modules[i]
        relu = i + 1 < len(modules) and isinstance(modules[i + 1], nn.ReLU)
        after = modules[i + 1 + relu] if i + 1 + relu < len(modules) else None
        if type(module) is nn.Linear and isinstance(after, Quantize):
            out.append(LinearToCodes(module, relu, after))
            i += 2 + relu
        elif isinstance(module, DynamicInt8Linear):
            out.append(module.fused(relu, nonnegative_input=bool(out) and _ends_in_relu(out[-1])))
            i += 1 + relu
        elif isinstance(module, Dequantize) and module.zero_point == 0 and i + 1 < len(modules) \
                and type(modules[i + 1]) is nn.Linear:  # (with a zero point, z W s 1 would cancel (W s) c)
            out.append(CodesToLinear(module, modules[i + 1]))
            i += 2
        else:
            out.append(module)
            i += 1
    return out


def _ends_in_relu(module: nn.Module) -> bool:
    """Whether ``module``'s output has passed a ReLU (a ReLU, or a dynamic layer with one fused)."""
    return isinstance(module, nn.ReLU) or (isinstance(module, DynamicInt8Linear) and module.linear.post_op == "relu")
