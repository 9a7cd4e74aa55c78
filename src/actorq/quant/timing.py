"""Robust single-thread timing of one forward pass (the actors' inner loop).

Example:
    >>> timing = time_forward(torch.nn.Linear(4, 4), torch.zeros(1, 4), iterations=20)
    >>> timing.median_us > 0
    True
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from actorq.util.threads import single_thread


@dataclass(frozen=True)
class Timing:
    """Microseconds per forward over ``iterations`` calls timed one by one.

    Attributes:
        median_us: the median call (what decisions use: robust to preemption spikes).
        min_us: the fastest call (the machine's best case).
        iterations: how many calls were timed.
    """

    median_us: float
    min_us: float
    iterations: int


@torch.no_grad()
def time_forward(
    module: nn.Module,
    inputs: torch.Tensor,
    iterations: int = 300,
    warmup: int = 20,
    budget_s: float = 2.0,
) -> Timing:
    """Times ``module(inputs)`` on one thread.

    Args:
        module: the network to time.
        inputs: one batch, e.g. ``[envs_per_worker, obs_dim]``.
        iterations: calls to time (fewer if ``budget_s`` runs out first, but at least 5).
        warmup: untimed calls first (builds quantized modules, warms caches); at least 3.
        budget_s: soft limit on the timed part, for wide networks at large batches.
    """
    with single_thread():
        warm_until = time.perf_counter() + budget_s / 4
        for done in range(warmup):
            module(inputs)
            if done >= 2 and time.perf_counter() > warm_until:
                break
        samples: list[float] = []
        deadline = time.perf_counter() + budget_s
        while len(samples) < iterations and (len(samples) < 5 or time.perf_counter() < deadline):
            start = time.perf_counter_ns()
            module(inputs)
            samples.append((time.perf_counter_ns() - start) / 1e3)
    samples.sort()
    return Timing(median_us=samples[len(samples) // 2], min_us=samples[0], iterations=len(samples))
