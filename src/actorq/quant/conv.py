"""Static int8 copies of convolutional policies (torch.ao's FX graph mode).

Convolutions and linear layers get per-channel int8 weights, a convolution or linear layer
followed by a ReLU is fused into one kernel, residual adds run on int8 tensors, and the
activation ranges are calibrated on frames the policy sees. What the engine's default recipe
does for each op is torch.ao's (``get_default_qconfig_mapping``); the engine is a choice
(``x86``: fbgemm's AVX2/AVX-512 kernels; ``onednn``: also AMX tiles).

One change to the x86 recipe: its activations get all 8 bits, not torch's 7, where this CPU's
kernels sum 8-bit inputs exactly (:func:`actorq.quant._ao.saturates_full_range`, measured once
per process, as for the MLP recipes), which makes the int8 copy's logit error smaller
(docs/measured/pixels.md).

Example:
    >>> from actorq.algos.conv import PixelPolicy
    >>> _ = torch.manual_seed(0)
    >>> policy = PixelPolicy("nature", 4, num_actions=4).eval()
    >>> frames = torch.randint(0, 256, (16, 4, 84, 84), dtype=torch.uint8)
    >>> int8 = quantize_conv_policy(policy, frames)
    >>> int8(frames).shape, serialized_bytes(int8) < serialized_bytes(policy) / 3
    (torch.Size([16, 4]), True)
"""

from __future__ import annotations

import copy
import io
import operator

import torch
from torch import nn

from actorq.quant import _ao
from actorq.quant._ao import DEFAULT_ENGINE, saturates_full_range
from actorq.util.memory_format import set_channels_last

CALIBRATION_CHUNK = 64
"""Frames per calibration forward (what the observers see at once does not change the ranges)."""


@torch.no_grad()
def quantize_conv_policy(policy: nn.Module, frames: torch.Tensor, engine: str = DEFAULT_ENGINE,
                         full_range: bool | None = None, observer: str = "histogram",
                         fp32_first_stage: bool = False) -> nn.Module:
    """A static int8 copy of ``policy`` (frames in, float out), its activation ranges
    calibrated on ``frames`` ``[N, C, H, W]`` (uint8). ``policy`` itself is left as it was.

    Args:
        full_range: 8-bit activations (``None``: where the engine's kernels sum them exactly
            on this CPU; onednn's recipe always has them).
        observer: how activation ranges are calibrated: ``histogram`` (torch.ao's recipe),
            ``minmax`` or ``moving_average`` (``quant.calibration``).
        fp32_first_stage: keep :func:`first_stage` in fp32 (channels-last).

    Raises:
        ValueError: for no calibration frames, or an engine this torch build lacks.
    """
    if len(frames) == 0:
        raise ValueError("an int8 copy needs calibration frames; got none")
    if engine not in torch.backends.quantized.supported_engines:
        raise ValueError(f"quantized engine {engine!r} is not in this torch build "
                         f"({', '.join(torch.backends.quantized.supported_engines)})")
    if full_range is None:
        full_range = full_range_for(engine)
    # The default layout: int8 kernels lay activations out their own way, and the actors'
    # template (traced from the layout's architecture) must trace the same graph.
    plain = set_channels_last(copy.deepcopy(policy).eval(), False)
    return _ao.convert_static_fx(plain, list(frames.split(CALIBRATION_CHUNK)), engine, full_range, observer,
                                 **fp32_parts(plain, fp32_first_stage))


def fp32_parts(policy: nn.Module, fp32_first_stage: bool) -> dict[str, tuple]:
    """What an int8 copy of ``policy`` keeps in fp32, as :func:`~actorq.quant._ao.convert_static_fx`
    takes it: with ``fp32_first_stage``, the :func:`first_stage` modules and, when there are
    any, the pixel scaling before them (a multiplication), so the fp32 convolution reads the
    frames themselves, not their quantized codes."""
    modules = tuple(first_stage(policy)) if fp32_first_stage else ()
    return {"fp32_modules": modules, "fp32_ops": (operator.mul,) if modules else ()}


def first_stage(policy: nn.Module) -> list[str]:
    """The names of the modules an fp32 first stage keeps: a first convolution followed by a
    max-pool (IMPALA-CNN's), both; else none (Nature-CNN's first convolution is as fast in int8).

    Why: at the full frame size, over the first convolution's few channels (16), torch's
    quantized max-pool took ten times as long as over 32 channels at the same size, and its
    int8 convolution with 4 input channels three times fp32's channels-last one: both ops
    together took 5.6 ms at a batch of 8 in int8, about 2-3.5 ms in fp32, on an AVX2-only
    CPU (docs/measured/pixels.md).

    Example:
        >>> trunk = nn.Sequential(nn.Conv2d(4, 16, 3), nn.MaxPool2d(3, 2), nn.Conv2d(16, 8, 3))
        >>> first_stage(trunk), first_stage(nn.Sequential(nn.Conv2d(4, 16, 3), nn.ReLU()))
        (['0', '1'], [])
    """
    leaves = [(name, module) for name, module in policy.named_modules() if not list(module.children())]
    first = next((k for k, (_, module) in enumerate(leaves) if isinstance(module, nn.Conv2d)), None)
    if first is None or first + 1 == len(leaves) or not isinstance(leaves[first + 1][1], nn.MaxPool2d):
        return []
    return [leaves[first][0], leaves[first + 1][0]]


def full_range_for(engine: str) -> bool:
    """Whether ``engine``'s int8 copies get 8-bit activations on this CPU (its kernels sum
    them exactly), else 7."""
    return not saturates_full_range(engine)


def serialized_bytes(module: nn.Module) -> int:
    """Bytes of ``module``'s state as ``torch.save`` writes it: what a push of it moves."""
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    return buffer.getbuffer().nbytes
