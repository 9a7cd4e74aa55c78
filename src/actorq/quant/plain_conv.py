"""Static int8 copies of convolutional trunks on plain tensors (``quant.engine=plain``):
``torch.int8`` weight codes with per-channel scales, ``torch.uint8`` activations laid out
channels-last, computed by oneDNN's int8 convolution and matmul
(``torch.ops.onednn.qconv2d_pointwise`` / ``qlinear_pointwise``, what Inductor lowers int8
convolutions and linear layers to). No quantized dtype, no torch.ao, nothing compiled.

The trunks of :mod:`actorq.algos.conv` (Nature- and IMPALA-CNN, under a linear output layer)
are read as a list of :class:`Step`; a convolution or linear layer followed by a ReLU runs as one
kernel, an IMPALA residual block as two (the skip added inside the second), max-pools and
ReLUs on the codes themselves. The frames are the first convolution's input codes as they
come (a uint8 pixel is its own code, scale 1/255), and the flatten before the first linear
layer reads the channels-last activations as they lie (that layer's columns are reordered
once, when a version is built). With ``fp32_ends`` the output layer stays fp32, as in the
torch.ao recipe (:func:`actorq.quant.conv.output_layer`); the first stage does not
(:func:`fp32_output`).

A payload holds each layer's codes, scales and bias (fp32 weights for a layer kept fp32)
and each activation's calibrated range ``(low, high)``, not its scale: each actor sets the
scales for its own CPU's kernels (8-bit activations, or 7 where they would saturate:
:func:`actorq.quant.onednn.activation_max`).

Example:
    >>> from actorq.algos.conv import PixelPolicy
    >>> _ = torch.manual_seed(0)
    >>> trunk = PixelPolicy("nature", 4, num_actions=4).eval()
    >>> frames = torch.randint(0, 256, (32, 4, 84, 84), dtype=torch.uint8)
    >>> copy = decode(trunk, encode(trunk, frames, fp32_ends=True), fp32_ends=True)
    >>> error = (copy(frames) - trunk(frames)).abs().max() / trunk(frames).abs().max()
    >>> bool(error < 0.05)
    True
"""

from __future__ import annotations

import copy
import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from actorq.quant import onednn
from actorq.quant.layout import Payload, PayloadSpec
from actorq.util.errors import ConfigError

WEIGHT_MAX = 127
"""Weight codes are symmetric, ``-127..127``."""
CALIBRATION_CHUNK = 64
"""Frames per calibration forward."""


@dataclasses.dataclass(frozen=True)
class Step:
    """One op of a trunk's forward pass on its activations.

    Attributes:
        kind: ``conv``, ``linear``, ``pool``, ``residual``, ``relu`` or ``flatten``.
        module: the fp32 module (a ``Conv2d``, ``Linear``, ``MaxPool2d`` or ``ResidualBlock``).
        relu: a ReLU right after a convolution or linear layer, run inside its kernel.
    """

    kind: str
    module: nn.Module | None = None
    relu: bool = False


def steps_of(trunk: nn.Module) -> list[Step]:
    """``trunk``'s forward pass as :class:`Step`; a ``ConfigError`` for a module these
    kernels do not run."""
    leaves = list(_leaves(trunk))
    steps: list[Step] = []
    for module in leaves:
        if isinstance(module, nn.ReLU) and steps and steps[-1].kind in ("conv", "linear") and not steps[-1].relu:
            steps[-1] = dataclasses.replace(steps[-1], relu=True)
        elif isinstance(module, (nn.Conv2d, nn.Linear)):
            steps.append(Step("conv" if isinstance(module, nn.Conv2d) else "linear", module, relu=False))
        elif isinstance(module, nn.MaxPool2d):
            steps.append(Step("pool", module))
        elif is_residual_block(module):
            steps.append(Step("residual", module))
        elif isinstance(module, nn.ReLU):
            steps.append(Step("relu"))
        elif isinstance(module, nn.Flatten):
            steps.append(Step("flatten"))
        else:
            raise ConfigError(f"quant.engine=plain runs Conv2d, Linear, ReLU, MaxPool2d, Flatten and residual "
                              f"blocks; the trunk has {type(module).__name__}: use another quant.engine")
    return steps


def _leaves(module: nn.Module):
    """The modules of ``module``'s forward pass in order: a pixel trunk's convolutions then its
    linear layers, a residual block as one."""
    if is_residual_block(module) or not list(module.children()):
        yield module
        return
    children = [module.convs, module.linear] if hasattr(module, "pixel_scale") else list(module.children())
    for child in children:
        yield from _leaves(child)


def is_residual_block(module: nn.Module) -> bool:
    """Whether ``module`` is an IMPALA residual block, ``x + conv1(relu(conv0(relu(x))))``
    (:class:`actorq.algos.conv.ResidualBlock`, known here by its parts: the algorithms sit
    above the precisions)."""
    return isinstance(getattr(module, "conv0", None), nn.Conv2d) and isinstance(getattr(module, "conv1", None), nn.Conv2d)


def pixel_scale(trunk: nn.Module) -> float:
    """What a uint8 frame is multiplied by on its way into ``trunk`` (its pixel trunk's)."""
    scales = [module.pixel_scale for module in trunk.modules() if hasattr(module, "pixel_scale")]
    if not scales:
        raise ConfigError(f"quant.engine=plain runs the pixel trunks of actorq.algos.conv; {type(trunk).__name__} "
                          "has none")
    return float(scales[0])


def fp32_output(steps: list[Step], fp32_ends: bool) -> bool:
    """Whether the last step, a linear output layer, stays fp32 (with ``fp32_ends``). The first
    stage runs int8 here even with ``fp32_ends``: torch.ao's recipe keeps IMPALA's first
    convolution and max-pool fp32 because its int8 kernels for them were slow, and these are
    not (docs/measured/pixels.md)."""
    return fp32_ends and steps[-1].kind == "linear" and not steps[-1].relu


def weighted(steps: list[Step]) -> list[nn.Module]:
    """The convolutions and linear layers of ``steps`` in forward (and module) order."""
    layers = []
    for step in steps:
        if step.kind == "residual":
            layers += [step.module.conv0, step.module.conv1]
        elif step.kind in ("conv", "linear"):
            layers.append(step.module)
    return layers


# --- encode: calibrated ranges and weight codes --------------------------------------------

@torch.no_grad()
def encode(trunk: nn.Module, frames: torch.Tensor, fp32_ends: bool, granularity: str = "per_channel",
           calibration: str = "minmax") -> Payload:
    """The payload of ``trunk``'s int8 copy: weight codes (one scale per output channel, or one
    per layer with ``granularity="per_tensor"``) and each activation's range on calibration
    ``frames`` ``[N, C, H, W]`` (uint8): the smallest and largest value it takes (``minmax``,
    the only ``calibration`` these copies take)."""
    if len(frames) == 0:
        raise ValueError("an int8 copy needs calibration frames; got none")
    if calibration != "minmax":
        raise ConfigError(f"quant.engine=plain calibrates convolutional policies with minmax ranges, not "
                          f"quant.calibration={calibration}: set quant.calibration=minmax or another quant.engine")
    steps = steps_of(trunk)
    last = fp32_output(steps, fp32_ends)
    payload: Payload = {}
    for k, layer in enumerate(weighted(steps)):
        payload.update(_layer_payload(k, layer, last and layer is steps[-1].module, granularity))
    for j, (low, high) in enumerate(_ranges(steps, frames, pixel_scale(trunk), last)):
        payload[f"a{j}_range"] = torch.tensor([low, high], dtype=torch.float32)
    return payload


def payload_spec(trunk: nn.Module, fp32_ends: bool, granularity: str = "per_channel") -> PayloadSpec:
    """The names, shapes and dtypes of :func:`encode`'s payload for ``trunk``'s structure."""
    steps = steps_of(trunk)
    last = fp32_output(steps, fp32_ends)
    spec: PayloadSpec = {}
    for k, layer in enumerate(weighted(steps)):
        payload = _layer_payload(k, layer, last and layer is steps[-1].module, granularity)
        spec.update({name: (tuple(t.shape), t.dtype) for name, t in payload.items()})
    for j in range(_range_count(steps, last)):
        spec[f"a{j}_range"] = ((2,), torch.float32)
    return spec


def _layer_payload(k: int, layer: nn.Module, fp32: bool, granularity: str) -> Payload:
    weight, bias = layer.weight.detach().float(), layer.bias.detach().float()
    if fp32:
        return {f"w{k}_weight": weight.clone(), f"w{k}_bias": bias.clone()}
    codes, scale = weight_codes(weight, per_channel=granularity == "per_channel")
    return {f"w{k}_codes": codes, f"w{k}_scale": scale, f"w{k}_bias": bias.clone()}


def weight_codes(weight: torch.Tensor, per_channel: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 codes of ``weight`` and their scales ``[out]``: one per output channel, or
    the layer's one repeated (the kernels take a scale per channel either way)."""
    flat = weight.reshape(weight.shape[0], -1)
    largest = flat.abs().amax(dim=1) if per_channel else flat.abs().amax().expand(flat.shape[0])
    scale = (largest / WEIGHT_MAX).clamp(min=1e-12)
    codes = torch.round(flat / scale[:, None]).clamp(-WEIGHT_MAX, WEIGHT_MAX).to(torch.int8)
    return codes.reshape(weight.shape), scale


def _weighted_count(steps: list[Step]) -> int:
    return len(weighted(steps))


def _ranges(steps: list[Step], frames: torch.Tensor, scale: float, last: bool) -> list[tuple[float, float]]:
    """Each code point's range on the fp32 pass over ``frames``, in the order :func:`decode`
    uses them: every step's output that is new codes (a residual block's inner activation
    before its output), the fp32 output layer's excepted; each range holds 0. The frames go
    through in chunks of :data:`CALIBRATION_CHUNK` (a whole calibration set's activations at
    once would not stay in the caches)."""
    lows: list[float] = []
    highs: list[float] = []
    for chunk in frames.split(CALIBRATION_CHUNK):
        points = _chunk_points(steps, chunk.float() * scale, last)
        if not lows:
            lows, highs = [0.0] * len(points), [0.0] * len(points)
        for j, (low, high) in enumerate(points):
            lows[j], highs[j] = min(lows[j], low), max(highs[j], high)
    return list(zip(lows, highs))


def _chunk_points(steps: list[Step], x: torch.Tensor, last: bool) -> list[tuple[float, float]]:
    points = []

    def seen(t: torch.Tensor) -> None:
        points.append((float(t.min()), float(t.max())))

    for index, step in enumerate(steps):
        if step.kind == "residual":  # x + conv1(relu(conv0(relu(x)))), its inner activation seen too
            block = step.module
            inner = torch.relu(block.conv0(torch.relu(x)))
            x = x + block.conv1(inner)
            seen(inner)
            seen(x)
            continue
        x = _fp32_step(step, x)
        if step.kind in ("conv", "linear") and not (last and index == len(steps) - 1):
            seen(x)
    return points


def _range_count(steps: list[Step], last: bool) -> int:
    count = 0
    for index, step in enumerate(steps):
        if step.kind == "residual":
            count += 2
        elif step.kind in ("conv", "linear") and not (last and index == len(steps) - 1):
            count += 1
    return count


def _fp32_step(step: Step, x: torch.Tensor) -> torch.Tensor:
    """``step`` on fp32 activations, as the trunk computes it."""
    if step.kind == "flatten":
        return x.flatten(1)
    if step.kind == "relu":
        return torch.relu(x)
    x = step.module(x)
    return torch.relu(x) if step.relu else x


# --- decode: the copy the actors run ---------------------------------------------------------

def decode(trunk: nn.Module, payload: Payload, fp32_ends: bool) -> nn.Module:
    """The int8 copy of a trunk of ``trunk``'s structure (its weights are not read) with
    ``payload``'s codes and ranges, its activation scales set for this CPU's kernels."""
    steps = steps_of(trunk)
    last = fp32_output(steps, fp32_ends)
    quant_max = onednn.activation_max()
    ranges = iter(qparams(payload[f"a{j}_range"], quant_max) for j in range(_range_count(steps, last)))
    layers = iter(range(_weighted_count(steps)))
    current = (pixel_scale(trunk) * 255 / quant_max, 0)  # a pixel's code: the pixel, or half of it on 7 bits
    modules: list[nn.Module] = [FramesIn(quant_max)]
    channels = None  # of the activations, as the last convolution left them
    for index, step in enumerate(steps):
        if last and index == len(steps) - 1:
            modules += [onednn.Dequantize(*current), _fp32_layer(step.module, payload, next(layers))]
            continue
        if step.kind == "conv":
            out = next(ranges)
            modules.append(onednn.Int8Conv2d(*_codes(payload, next(layers)), step.module, current, out, step.relu))
            current, channels = out, step.module.out_channels
        elif step.kind == "residual":
            inner, out = next(ranges), next(ranges)
            conv0 = onednn.Int8Conv2d(*_codes(payload, next(layers)), step.module.conv0, current, inner, relu=True)
            conv1 = onednn.Int8Conv2d(*_codes(payload, next(layers)), step.module.conv1, inner, out, relu=False)
            modules.append(Int8Residual(conv0, conv1, current))
            current = out
        elif step.kind == "pool":
            modules.append(CodesMaxPool(step.module))
        elif step.kind == "relu":
            modules.append(CodesReLU(current[1]))
        elif step.kind == "flatten":
            modules.append(FlattenChannelsLast())
        elif step.kind == "linear":
            codes, weight_scale, bias = _codes(payload, next(layers))
            if channels is not None:  # the columns in the channels-last order the flatten reads
                codes, channels = channels_last_columns(codes, channels), None
            out = next(ranges)
            modules.append(onednn.Int8Linear(codes, weight_scale, bias, current, out, relu=step.relu))
            current = out
    if not (last and steps[-1].kind == "linear"):
        modules.append(onednn.Dequantize(*current))
    return nn.Sequential(*modules)


def qparams(value_range: torch.Tensor, quant_max: int) -> tuple[float, int]:
    """``(scale, zero_point)`` of uint8 codes ``0..quant_max`` over ``value_range`` ``(low, high)``
    (which holds 0, so 0 is a code)."""
    low, high = float(value_range[0]), float(value_range[1])
    scale = max((high - low) / quant_max, 1e-8)
    return scale, int(min(quant_max, max(0, round(-low / scale))))


def _codes(payload: Payload, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return payload[f"w{k}_codes"], payload[f"w{k}_scale"], payload[f"w{k}_bias"]


def _fp32_layer(module: nn.Module, payload: Payload, k: int) -> nn.Module:
    """A copy of ``module`` (a ``Conv2d`` or ``Linear``) with the payload's fp32 weights."""
    layer = copy.deepcopy(module).float().eval().requires_grad_(False)
    layer.weight.copy_(payload[f"w{k}_weight"])
    layer.bias.copy_(payload[f"w{k}_bias"])
    return layer


def channels_last_columns(weight: torch.Tensor, channels: int) -> torch.Tensor:
    """A linear layer's ``weight`` ``[out, C*H*W]`` (columns in the ``C, H, W`` order a flatten
    of ``[N, C, H, W]`` gives) with its columns in ``H, W, C`` order: what flattening the same
    activations laid out channels-last gives, with no copy. Square ``H = W``.

    Example:
        >>> x = torch.arange(2 * 3 * 3.).reshape(1, 2, 3, 3)
        >>> w = torch.randn(4, 18)
        >>> last = x.contiguous(memory_format=torch.channels_last).permute(0, 2, 3, 1).reshape(1, -1)
        >>> torch.allclose(x.flatten(1) @ w.t(), last @ channels_last_columns(w, 2).t())
        True
    """
    out, columns = weight.shape
    side = math.isqrt(columns // channels)
    return weight.reshape(out, channels, side, side).permute(0, 2, 3, 1).reshape(out, columns).contiguous()


def dequantized_weights(trunk: nn.Module, payload: Payload) -> list[torch.Tensor]:
    """Every convolution's and linear layer's weight the copy computes with, in module order:
    codes times scales, or the fp32 weights a layer kept."""
    weights = []
    for k in range(_weighted_count(steps_of(trunk))):
        if f"w{k}_weight" in payload:
            weights.append(payload[f"w{k}_weight"])
        else:
            codes, scale = payload[f"w{k}_codes"], payload[f"w{k}_scale"]
            weights.append(codes.float() * scale.reshape(-1, *[1] * (codes.dim() - 1)))
    return weights


class FramesIn(nn.Module):
    """uint8 frames -> the first convolution's input codes, channels-last: the frames
    themselves (a pixel is its own code), or halved where the kernels take 7 bits."""

    def __init__(self, quant_max: int):
        super().__init__()
        self.quant_max = int(quant_max)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        if self.quant_max < 255:
            frames = onednn.codes_of(torch.round(frames.float() * (self.quant_max / 255.0)))
        return frames.contiguous(memory_format=torch.channels_last)


class Int8Residual(nn.Module):
    """An IMPALA residual block on codes: ``x + conv1(relu(conv0(relu(x))))``, the first ReLU
    on the codes, the second inside ``conv0``'s kernel, the skip added inside ``conv1``'s."""

    def __init__(self, conv0: nn.Module, conv1: nn.Module, in_qparams: tuple[float, int]):
        super().__init__()
        self.conv0, self.conv1 = conv0, conv1
        self.in_scale, self.in_zero_point = float(in_qparams[0]), int(in_qparams[1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = self.conv0(torch.clamp(x, min=self.in_zero_point))
        return self.conv1.add_to(inner, x, self.in_scale, self.in_zero_point)


class CodesMaxPool(nn.Module):
    """A max-pool on uint8 codes (the largest code is the largest value's): the maximum of the
    window's shifted views, padded with code 0 (no value is below it)."""

    def __init__(self, pool: nn.MaxPool2d):
        super().__init__()
        self.kernel, self.stride, self.padding = _pair(pool.kernel_size), _pair(pool.stride), _pair(pool.padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (kh, kw), (sh, sw), (ph, pw) = self.kernel, self.stride, self.padding
        height, width = x.shape[-2] + 2 * ph, x.shape[-1] + 2 * pw
        rows, cols = (height - kh) // sh + 1, (width - kw) // sw + 1
        padded = F.pad(x, (pw, pw, ph, ph))
        out = padded[:, :, :sh * (rows - 1) + 1:sh, :sw * (cols - 1) + 1:sw]
        for dy in range(kh):
            for dx in range(kw):
                if dy or dx:
                    out = torch.maximum(out, padded[:, :, dy:dy + sh * (rows - 1) + 1:sh, dx:dx + sw * (cols - 1) + 1:sw])
        return out.contiguous(memory_format=torch.channels_last)


class CodesReLU(nn.Module):
    """A ReLU on uint8 codes: every code below the zero point's raised to it."""

    def __init__(self, zero_point: int):
        super().__init__()
        self.zero_point = int(zero_point)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, min=self.zero_point)


class FlattenChannelsLast(nn.Module):
    """``[N, C, H, W]`` channels-last -> ``[N, H*W*C]``, a view of the memory as it lies."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)


def _pair(value) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)
