"""Static int8 copies of convolutional policies (torch.ao's FX graph mode).

Convolutions and linear layers get per-channel int8 weights, a convolution or linear layer
followed by a ReLU is fused into one kernel, residual adds run on int8 tensors, and the
activation ranges are calibrated on frames the policy sees. What the engine's default recipe
does for each op is torch.ao's (``get_default_qconfig_mapping``); the engine is a choice
(``x86``: fbgemm's AVX2/AVX-512 kernels; ``onednn``: also AMX tiles). With ``fp32_ends``
(``quant.bits=8``'s recipe) the :func:`first_stage` and the :func:`output_layer` stay fp32.

One change to the x86 recipe: its activations get all 8 bits, not torch's 7, where the CPU
that runs the copy sums 8-bit inputs exactly (:func:`actorq.quant._ao.saturates_full_range`,
measured once per process, as for the MLP recipes), which makes the int8 copy's logit error
smaller (docs/measured/pixels.md). The ranges are calibrated on 8 bits and re-expressed on 7
where that CPU needs it (:func:`reduces_activation_range`), so a payload carries nothing of
the learner's CPU: each actor makes the choice for its own.

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
from actorq.quant._ao import DEFAULT_ENGINE
from actorq.util.memory_format import set_channels_last

CALIBRATION_CHUNK = 64
"""Frames per calibration forward (what the observers see at once does not change the ranges)."""


@torch.no_grad()
def quantize_conv_policy(policy: nn.Module, frames: torch.Tensor, engine: str = DEFAULT_ENGINE,
                         full_range: bool | None = None, observer: str = "histogram",
                         fp32_ends: bool = False) -> nn.Module:
    """A static int8 copy of ``policy`` (frames in, float out), its activation ranges
    calibrated on ``frames`` ``[N, C, H, W]`` (uint8). ``policy`` itself is left as it was.

    Args:
        full_range: 8-bit activations (``None``: where the engine's kernels sum them exactly
            on this CPU; onednn's recipe always has them): :func:`reduces_activation_range`.
        observer: how activation ranges are calibrated: ``histogram`` (torch.ao's recipe),
            ``minmax`` or ``moving_average`` (``quant.calibration``).
        fp32_ends: keep :func:`fp32_parts` in fp32: the first stage (channels-last) and the
            output layer.

    Raises:
        ValueError: for no calibration frames, or an engine this torch build lacks.
    """
    if len(frames) == 0:
        raise ValueError("an int8 copy needs calibration frames; got none")
    if engine not in torch.backends.quantized.supported_engines:
        raise ValueError(f"quantized engine {engine!r} is not in this torch build "
                         f"({', '.join(torch.backends.quantized.supported_engines)})")
    # The default layout: int8 kernels lay activations out their own way, and the actors'
    # template (traced from the layout's architecture) must trace the same graph.
    plain = set_channels_last(copy.deepcopy(policy).eval(), False)
    converted = _ao.convert_static_fx(plain, list(frames.split(CALIBRATION_CHUNK)), engine, True, observer,
                                      **fp32_parts(plain, fp32_ends))
    if reduces_activation_range(engine, full_range):
        converted.load_state_dict(_ao.reduced_activation_range(converted.state_dict()))
    return converted


def reduces_activation_range(engine: str, full_range: bool | None = None) -> bool:
    """Whether an int8 copy for ``engine`` runs its activations on 7 bits: the ranges it was
    calibrated to on 8 bits, re-expressed (:func:`~actorq.quant._ao.reduced_activation_range`)
    where ``full_range`` is false (``None``: :func:`full_range_for` this CPU) and the engine's
    recipe reduces them (x86, fbgemm; onednn's keeps 8).

    A payload carries the 8-bit ranges and each actor asks this on its own CPU when it loads
    a version, so the choice is the actors' CPU's, not the learner's."""
    if full_range is None:
        full_range = full_range_for(engine)
    return not full_range and engine in _ao.REDUCED_RANGE_ENGINES


def fp32_parts(policy: nn.Module, fp32_ends: bool) -> dict[str, tuple]:
    """What an int8 copy of ``policy`` keeps in fp32, as :func:`~actorq.quant._ao.convert_static_fx`
    takes it: with ``fp32_ends``, the :func:`first_stage` modules and, when there are any, the
    pixel scaling before them (a multiplication), so the fp32 convolution reads the frames
    themselves, not their quantized codes; and the :func:`output_layer`.

    Example:
        >>> policy = nn.Sequential(nn.Conv2d(4, 16, 3), nn.MaxPool2d(3, 2), nn.ReLU(), nn.Flatten(),
        ...                        nn.Linear(16, 6))
        >>> fp32_parts(policy, fp32_ends=True)["fp32_modules"], fp32_parts(policy, fp32_ends=False)
        (('0', '1', '4'), {'fp32_modules': (), 'fp32_ops': ()})
    """
    if not fp32_ends:
        return {"fp32_modules": (), "fp32_ops": ()}
    stage = tuple(first_stage(policy))
    return {"fp32_modules": stage + tuple(output_layer(policy)), "fp32_ops": (operator.mul,) if stage else ()}


def output_layer(policy: nn.Module) -> list[str]:
    """The name of the layer that writes ``policy``'s outputs, when it is a ``Linear`` (the
    last module, not followed by an activation: DQN's Q-values, PPO's logits); else none.

    Why fp32: as in the MLP recipe (:mod:`~actorq.quant.codecs.int8_static_fp32_ends`), the
    outputs actions are read from would otherwise sit on a 256-step grid over their
    calibrated range, coarser than the gap between two nearly tied Q-values or logits, and the
    layer is thin (``features x actions``), so fp32 costs little time.

    Example:
        >>> output_layer(nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2)))
        ['2']
        >>> output_layer(nn.Sequential(nn.Linear(8, 4), nn.ReLU()))  # features, not outputs
        []
    """
    leaves = [(name, module) for name, module in policy.named_modules() if not list(module.children())]
    if not leaves or not isinstance(leaves[-1][1], nn.Linear):
        return []
    return [leaves[-1][0]]


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
    return not _ao.saturates_full_range(engine)


def serialized_bytes(module: nn.Module) -> int:
    """Bytes of ``module``'s state as ``torch.save`` writes it: what a push of it moves."""
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    return buffer.getbuffer().nbytes
