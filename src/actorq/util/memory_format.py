"""Channels-last convolutions where they are faster: a trunk that has a ``channels_last``
attribute (:mod:`actorq.algos.conv`) lays its activations out ``[N, H, W, C]`` when it is set.

oneDNN's CPU convolutions, and cuDNN's with tensor cores, often run faster channels-last;
measured on a Zen 4 CPU (one thread), an fp32 IMPALA-CNN actor's batch of 8 frames took half
the time and its bf16 update 0.6 of it, while a Nature-CNN's bf16 update gained nothing. The
layout changes no value a network computes (only rounding), so the choice is measured where
the network runs: the actors' fp32 copy (:func:`channels_last_faster`) and the learner's update
(``trainer.precision=auto``, :mod:`actorq.run.learner_precision`).

Example:
    >>> from torch import nn
    >>> class Trunk(nn.Sequential):
    ...     channels_last = False
    >>> trunk = Trunk(nn.Conv2d(1, 2, 3))
    >>> has_layout_choice(trunk), set_channels_last(trunk, True).channels_last
    (True, True)
"""

from __future__ import annotations

import time

import torch
from torch import nn

from actorq.util.choice import MARGIN
from actorq.util.threads import single_thread

ATTRIBUTE = "channels_last"
"""The attribute a module reads to lay its activations out channels-last."""


def has_layout_choice(module: nn.Module) -> bool:
    """Whether ``module`` holds a trunk that can run channels-last."""
    return any(hasattr(m, ATTRIBUTE) for m in module.modules())


def set_channels_last(module: nn.Module, on: bool) -> nn.Module:
    """Sets every such trunk in ``module`` channels-last (or not); returns ``module``."""
    for m in module.modules():
        if hasattr(m, ATTRIBUTE):
            setattr(m, ATTRIBUTE, bool(on))
    return module


def uses_channels_last(module: nn.Module) -> bool:
    """Whether a trunk in ``module`` runs channels-last."""
    return any(getattr(m, ATTRIBUTE, False) for m in module.modules())


@torch.no_grad()
def channels_last_faster(module: nn.Module, inputs: torch.Tensor, repeats: int = 5, rounds: int = 3,
                         margin: float = MARGIN) -> tuple[bool, dict[str, float]]:
    """``(faster, ms)``: whether ``module(inputs)`` runs faster channels-last, by ``margin``
    (else the default layout stays), on one thread as an actor runs it, and each layout's best
    mean milliseconds per call over ``rounds`` interleaved rounds of ``repeats`` calls.
    ``module`` is left with the faster layout set."""
    ms: dict[str, float] = {}
    with single_thread():
        for _ in range(rounds):
            for layout in ("default", "channels_last"):
                set_channels_last(module, layout == "channels_last")
                module(inputs)  # warm: kernels for this layout
                start = time.perf_counter()
                for _ in range(repeats):
                    module(inputs)
                mean = (time.perf_counter() - start) * 1e3 / repeats
                ms[layout] = min(ms.get(layout, float("inf")), mean)
    faster = ms["channels_last"] <= (1.0 - margin) * ms["default"]
    set_channels_last(module, faster)
    return faster, {layout: round(value, 3) for layout, value in ms.items()}

