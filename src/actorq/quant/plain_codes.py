"""The learner's side of an MLP's int8 copy on plain tensors (``quant.engine=plain``): weight
codes and activation scales computed with plain tensor arithmetic, the same numbers torch.ao's
observers give (symmetric int8 weights, affine uint8 activations on 8 bits or, where the
actors' kernels would saturate, 7), so a payload is the same whichever side encoded it and no
quantized dtype or torch.ao module is made on the way.

Example:
    >>> weight = torch.tensor([[0.5, -1.0], [0.25, 0.125]])
    >>> codes = weight_codes(weight, torch.zeros(2), per_channel=True)
    >>> codes["weight"].tolist(), [round(s, 5) for s in codes["weight_scale"].tolist()]
    ([[64, -127], [127, 64]], [0.00784, 0.00196])
    >>> activation_qparams(torch.tensor(-1.0), torch.tensor(3.0), quant_max=255)
    (tensor([0.0157]), tensor([64], dtype=torch.int32))
"""

from __future__ import annotations

import torch
from torch import nn

from actorq.quant.layout import Payload
from actorq.util.errors import ConfigError

WEIGHT_MIN, WEIGHT_MAX = -128, 127
EPS = torch.finfo(torch.float32).eps
MOVING_AVERAGE = 0.01
"""How far each calibration chunk moves a ``moving_average`` range (torch.ao's constant)."""
CALIBRATIONS = ("minmax", "moving_average")
"""The learned observers computed here (torch.ao's ``histogram`` search is not)."""
CHUNKS = 8
"""Calibration chunks a ``moving_average`` range sees in turn."""


def weight_scale(weight: torch.Tensor, bits: int, per_channel: bool) -> torch.Tensor:
    """The symmetric ``bits``-bit scales of a ``[out, in]`` weight, ``[out]`` (per channel) or
    ``[1]`` (per tensor): the largest magnitude over half the codes' span, as torch.ao's
    symmetric observers compute it (zero points 0)."""
    weight = weight.detach().float()
    largest = weight.abs().amax(dim=1) if per_channel else weight.abs().amax().reshape(1)
    return torch.clamp(largest / ((2 ** bits - 1) / 2), min=EPS)


def weight_codes(weight: torch.Tensor, bias: torch.Tensor | None, per_channel: bool) -> Payload:
    """``weight`` ``[out, in]`` as symmetric int8 codes with one scale per output channel (or
    one per tensor), zero points 0, and the fp32 ``bias``: the payload's ``weight``,
    ``weight_scale``, ``weight_zero_point`` and ``bias``."""
    weight = weight.detach().float()
    scale = weight_scale(weight, 8, per_channel)
    per_row = scale[:, None] if per_channel else scale
    codes = torch.clamp(torch.round(weight * (1.0 / per_row)), WEIGHT_MIN, WEIGHT_MAX).to(torch.int8)
    return {"weight": codes, "weight_scale": scale, "weight_zero_point": torch.zeros(len(scale), dtype=torch.int32),
            "bias": (torch.zeros(weight.shape[0]) if bias is None else bias.detach().float()).clone()}


def activation_qparams(low: torch.Tensor, high: torch.Tensor, quant_max: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scale [1], zero_point [1])`` of uint8 codes ``0..quant_max`` over ``[low, high]``
    widened to hold 0."""
    low = torch.clamp(torch.as_tensor(low, dtype=torch.float32), max=0.0)
    high = torch.clamp(torch.as_tensor(high, dtype=torch.float32), min=0.0)
    scale = torch.clamp((high - low) / float(quant_max), min=EPS)
    zero_point = torch.clamp(-torch.round(low / scale).to(torch.int32), 0, quant_max)
    return scale.reshape(1), zero_point.to(torch.int32).reshape(1)


def fixed_qparams(low: float, high: float, quant_max: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``fixed`` observer's scale and zero point over ``[low, high]`` (widened to hold 0)."""
    low, high = min(low, 0.0), max(high, 0.0)
    scale = (high - low) / quant_max
    return torch.tensor([scale]), torch.tensor([int(round(-low / scale))], dtype=torch.int32)


class Range:
    """The range of values a point of the trunk takes over the calibration chunks:
    ``minmax`` (the smallest and largest), or ``moving_average`` (each chunk's moves it
    :data:`MOVING_AVERAGE` of the way)."""

    def __init__(self, calibration: str):
        if calibration not in CALIBRATIONS:
            raise ConfigError(f"quant.engine=plain calibrates an MLP with {' or '.join(CALIBRATIONS)} ranges, not "
                              f"quant.calibration={calibration}: set one of those or another quant.engine")
        self.calibration = calibration
        self.low = self.high = None

    def see(self, x: torch.Tensor) -> None:
        low, high = x.min(), x.max()
        if self.low is None:
            self.low, self.high = low, high
        elif self.calibration == "minmax":
            self.low, self.high = torch.minimum(self.low, low), torch.maximum(self.high, high)
        else:
            self.low = self.low + MOVING_AVERAGE * (low - self.low)
            self.high = self.high + MOVING_AVERAGE * (high - self.high)


@torch.no_grad()
def static_payload(trunk: nn.Sequential, calibration: torch.Tensor | None, spec, quant_max: int) -> Payload:
    """The int8 static payload of an MLP ``trunk`` (``Linear -> [LayerNorm] -> [ReLU]`` blocks):
    ``input_`` qparams, each layer ``l{k}_``'s weight codes and output qparams and, after a
    norm, ``l{k}_norm_``'s. Activations a ``Linear`` reads take ``0..quant_max``, the trunk's
    output all 8 bits; ranges from ``spec``'s observer (``learned``: ``spec.calibration`` over
    ``calibration``; ``fixed``: ``spec.input_range`` and ``spec.activation_max``)."""
    points = _observed_points(trunk)
    fixed = spec.observer == "fixed"
    ranges = None if fixed else _ranges(trunk, points, _calibration(trunk, calibration, spec), spec)
    payload: Payload = {}
    amax = spec.activation_max
    for index, (name, module, fused) in enumerate(points):
        bits = 255 if index == len(points) - 1 else quant_max
        if ranges is None:
            low, high = spec.input_range if name == "input_" else (0.0 if fused else -amax, amax)
            scale, zero_point = fixed_qparams(low, high, bits)
        else:
            scale, zero_point = activation_qparams(ranges[index].low, ranges[index].high, bits)
        payload[f"{name}scale"], payload[f"{name}zero_point"] = scale, zero_point
        if isinstance(module, nn.Linear):
            payload.update({f"{name}{key}": value for key, value in
                            weight_codes(module.weight, module.bias, spec.granularity == "per_channel").items()})
        elif isinstance(module, nn.LayerNorm):
            payload[f"{name}weight"] = module.weight.detach().float().clone()
            payload[f"{name}bias"] = module.bias.detach().float().clone()
    return payload


def dynamic_payload(trunk: nn.Sequential, per_channel: bool) -> Payload:
    """The int8 dynamic payload's weight codes: ``l{k}_`` per ``Linear`` of ``trunk``."""
    linears = [module for module in trunk if isinstance(module, nn.Linear)]
    payload: Payload = {}
    for k, linear in enumerate(linears):
        payload.update({f"l{k}_{key}": value for key, value in weight_codes(linear.weight, linear.bias,
                                                                             per_channel).items()})
    return payload


def _observed_points(trunk: nn.Sequential) -> list[tuple[str, nn.Module | None, bool]]:
    """``(payload prefix, module, ReLU fused)`` for the input and each module whose output has
    qparams: every ``Linear`` (a ReLU right after it fused) and ``LayerNorm``."""
    points: list[tuple[str, nn.Module | None, bool]] = [("input_", None, False)]
    modules, k = list(trunk), -1
    for i, module in enumerate(modules):
        if isinstance(module, nn.Linear):
            k += 1
            fused = i + 1 < len(modules) and isinstance(modules[i + 1], nn.ReLU)
            points.append((f"l{k}_", module, fused))
        elif isinstance(module, nn.LayerNorm):
            points.append((f"l{k}_norm_", module, False))
    return points


def _calibration(trunk: nn.Sequential, calibration: torch.Tensor | None, spec) -> torch.Tensor:
    """The calibration rows ``[N, in]``; without any, two drawn in ``spec.input_range`` (as
    torch.ao's recipe does)."""
    if calibration is None or len(calibration) == 0:
        in_features = next(module for module in trunk if isinstance(module, nn.Linear)).in_features
        return torch.empty(2, in_features).uniform_(*spec.input_range)
    return calibration.detach().float().reshape(-1, calibration.shape[-1])


def _ranges(trunk: nn.Sequential, points, calibration: torch.Tensor, spec) -> list[Range]:
    """Each point's :class:`Range` over the calibration, chunk by chunk as torch.ao's observers
    see it (a fused ReLU's output, not the Linear's)."""
    ranges = [Range(spec.calibration) for _ in points]
    observed = {id(module): index for index, (_, module, _) in enumerate(points) if module is not None}
    for chunk in torch.chunk(calibration, min(CHUNKS, len(calibration))):
        ranges[0].see(chunk)
        x = chunk
        for module in trunk:
            x = module(x)
            index = observed.get(id(module))
            if index is not None:
                ranges[index].see(torch.relu(x) if points[index][2] else x)
    return ranges
