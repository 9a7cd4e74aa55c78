"""Prioritized experience replay's sampling rule (Schaul et al., 2016) over a K-ary sum tree.

Slot ``i`` with priority ``p_i`` is drawn with probability ``P(i) = p_i^alpha / sum_k p_k^alpha``
and carries the importance-sampling weight ``w_i = (N * P(i))^-beta / max_k w_k``, where the
maximum runs over every stored slot (the one with the smallest priority). ``beta`` rises
linearly to 1 as training proceeds. New slots get the largest priority seen so far, so each
transition is replayed at least once soon after it arrives.

Example:
    >>> priorities = Priorities(capacity=4, alpha=1.0, beta=1.0)
    >>> priorities.add(np.arange(4))
    >>> priorities.update(np.array([0]), np.array([3.0]))
    >>> slots, probabilities = priorities.draw(6)  # one slot per sixth of the mass
    >>> slots.tolist(), probabilities.round(3).tolist()
    ([0, 0, 0, 1, 2, 3], [0.5, 0.5, 0.5, 0.167, 0.167, 0.167])
    >>> priorities.weights(probabilities).round(3).tolist()
    [0.333, 0.333, 0.333, 1.0, 1.0, 1.0]
"""

from __future__ import annotations

import numpy as np
import torch

from actorq.data.replay.sumtree import InvalidValue, SumTree


class Priorities:
    """Per-slot priorities, stratified sampling, importance weights and ``beta`` annealing.

    Args:
        capacity: number of slots.
        alpha: priority exponent; 0 samples uniformly, 1 fully by priority.
        beta: initial importance-sampling exponent, in ``[0, 1]``.
        beta_annealing_steps: number of :meth:`anneal` calls over which ``beta`` rises
            linearly to 1; 0 uses ``beta = 1`` from the start.
        fanout: children per sum-tree node, a power of two.
        eps: added to every priority so that no transition becomes unreachable.
        seed: seed of the sampling generator.
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_annealing_steps: int = 100_000,
        fanout: int = 16,
        eps: float = 1e-6,
        seed: int = 0,
    ):
        _check_arguments(capacity, alpha, beta, beta_annealing_steps, fanout, eps)
        self.tree = SumTree(capacity, fanout)
        self.alpha = alpha
        self.initial_beta = beta
        self.beta_annealing_steps = beta_annealing_steps
        self.eps = eps
        self.max_priority = 1.0
        self.steps = 0
        self.rng = np.random.default_rng(seed)
        self._stratum_starts = np.empty(0)

    @property
    def beta(self) -> float:
        """The current importance-sampling exponent."""
        if self.steps >= self.beta_annealing_steps:
            return 1.0
        progress = self.steps / self.beta_annealing_steps
        return self.initial_beta + (1.0 - self.initial_beta) * progress

    def anneal(self) -> None:
        """Moves ``beta`` one step towards 1."""
        self.steps += 1

    def add(self, slots: np.ndarray, available: np.ndarray | None = None) -> None:
        """Gives ``slots`` (mostly runs of consecutive slots) the largest priority seen so
        far, or, where ``available`` is False, priority zero so that they cannot be drawn."""
        priority = self.max_priority**self.alpha
        if available is None:
            values = np.full(len(slots), priority)
        else:
            values = np.where(available, priority, 0.0)
        self.tree.update(slots, values)

    def update(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        """Sets the priorities (e.g. absolute TD errors, non-negative) of ``slots``."""
        if not len(priorities):
            return
        try:  # the tree checks every slot and priority before it writes any
            highest = self.tree.update(slots, priorities, offset=self.eps, power=self.alpha)
        except InvalidValue as error:
            raise ValueError(
                f"priorities must be finite and non-negative, got {error.value} for slot {error.index}"
            ) from None
        self.max_priority = max(self.max_priority, highest + self.eps)

    def draw(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Draws ``batch_size`` slots, one from each of ``batch_size`` equal slices of the
        total priority mass (stratified sampling), in increasing order of slot.

        Returns:
            The slots and their probabilities ``P(i)``.
        """
        total = self.tree.total
        if total <= 0:
            raise RuntimeError("cannot sample: no slot has a positive priority")
        targets = self.rng.random(batch_size)
        targets += self._strata(batch_size)
        targets *= total / batch_size
        slots = self.tree.find(targets)
        return slots, self.tree.values(slots) / np.float64(total)

    def _strata(self, batch_size: int) -> np.ndarray:
        """``0, 1, ..., batch_size - 1`` as floats, kept from the last call of that size."""
        if len(self._stratum_starts) != batch_size:
            self._stratum_starts = np.arange(batch_size, dtype=np.float64)
        return self._stratum_starts

    def weights(self, probabilities: np.ndarray) -> np.ndarray:
        """Importance-sampling weights of slots drawn with ``probabilities``, at the current
        ``beta``; the slot with the smallest priority gets weight 1."""
        # (N * P(i))^-beta / (N * P_min)^-beta: the number of slots N cancels out.
        smallest = self.tree.min_positive / self.tree.total
        return (probabilities / smallest) ** -self.beta

    def state_dict(self) -> dict:
        return {
            "max_priority": self.max_priority,
            "steps": self.steps,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict) -> None:
        self.max_priority = state["max_priority"]
        self.steps = state["steps"]
        self.rng.bit_generator.state = state["rng"]


def _check_arguments(
    capacity: int, alpha: float, beta: float, beta_annealing_steps: int, fanout: int, eps: float
) -> None:
    if capacity <= 0:
        raise ValueError(f"replay capacity must be positive, got {capacity}")
    if alpha < 0:
        raise ValueError(f"priority exponent alpha must be >= 0, got {alpha}")
    if not 0 <= beta <= 1:
        raise ValueError(f"importance-sampling exponent beta must be in [0, 1], got {beta}")
    if beta_annealing_steps < 0:
        raise ValueError(f"beta_annealing_steps must be >= 0, got {beta_annealing_steps}")
    if fanout < 2 or fanout & (fanout - 1):
        raise ValueError(f"sum-tree fanout must be a power of two >= 2, got {fanout}")
    if eps < 0:
        raise ValueError(f"priority eps must be >= 0, got {eps}")


def as_numpy(values: torch.Tensor | np.ndarray) -> np.ndarray:
    """A numpy view (or copy, for a GPU tensor) of indices or priorities."""
    if isinstance(values, torch.Tensor):
        if values.is_cpu and not values.requires_grad:
            return values.numpy()  # skips two calls into torch, a microsecond each
        return values.detach().cpu().numpy()
    return np.asarray(values)
