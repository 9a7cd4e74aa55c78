"""Prioritized replay: a ring buffer of transitions drawn in proportion to their priority.

Example:
    >>> from tensordict import TensorDict
    >>> buffer = PrioritizedReplay(capacity=100, alpha=0.6, beta=0.4)
    >>> rows = TensorDict({"observation": torch.zeros(10, 3), "action": torch.zeros(10, 1),
    ...                    "reward": torch.zeros(10), "next_observation": torch.zeros(10, 3),
    ...                    "discount": torch.ones(10)}, batch_size=[10])
    >>> buffer.extend(rows)
    >>> sample = buffer.sample(4)
    >>> sample.batch.batch_size, sample.weights.shape
    (torch.Size([4]), torch.Size([4]))
    >>> buffer.update_priorities(sample.indices, torch.tensor([0.5, 1.0, 2.0, 0.1]))
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDictBase

from actorq.algos.batches import Sample
from actorq.data.replay.priorities import Priorities, as_numpy
from actorq.data.replay.uniform import UniformReplay


class PrioritizedReplay(UniformReplay):
    """The uniform ring buffer, sampled by priority over a K-ary sum tree.

    Transitions are drawn with probability ``p_i^alpha / sum_k p_k^alpha``, one from each
    of ``batch_size`` equal slices of the priority mass, and come with importance-sampling
    weights ``(N * P(i))^-beta`` normalised to at most 1; ``beta`` rises linearly from its
    initial value to 1 over ``beta_annealing_steps`` calls to :meth:`sample`. New
    transitions get the largest priority seen so far.

    Args:
        capacity: maximum number of transitions kept.
        alpha: priority exponent; 0 samples uniformly.
        beta: initial importance-sampling exponent, in ``[0, 1]``.
        beta_annealing_steps: number of :meth:`sample` calls until ``beta`` reaches 1.
        fanout: children per sum-tree node, a power of two (2 to 256).
        eps: added to every priority so that no transition becomes unreachable.
        seed: seed of the sampling generator.

    Example:
        >>> from tensordict import TensorDict
        >>> buffer = PrioritizedReplay(capacity=8, alpha=1.0, beta=1.0)
        >>> buffer.extend(TensorDict({"reward": torch.arange(4.0)}, batch_size=[4]))
        >>> buffer.update_priorities(torch.tensor([0, 1, 2, 3]), torch.tensor([0.0, 0, 0, 1]))
        >>> buffer.sample(2).batch["reward"].tolist()  # only slot 3 has real priority
        [3.0, 3.0]
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
        super().__init__(capacity, seed)
        self.priorities = Priorities(
            capacity, alpha, beta, beta_annealing_steps, fanout, eps, seed
        )

    @property
    def beta(self) -> float:
        """The importance-sampling exponent the next :meth:`sample` uses."""
        return self.priorities.beta

    def extend(self, transitions: TensorDictBase) -> None:
        first = self.cursor
        super().extend(transitions)
        written = min(transitions.batch_size[0], self.capacity)
        self.priorities.add((first + np.arange(written)) % self.capacity)

    def sample(self, batch_size: int) -> Sample:
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        slots, probabilities = self.priorities.draw(batch_size)
        weights = self.priorities.weights(probabilities)
        self.priorities.anneal()
        indices = torch.from_numpy(slots)
        batch = self.storage.read(indices)
        return Sample(batch, indices, torch.from_numpy(weights.astype(np.float32)))

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        slots = as_numpy(indices)
        message = f"replay indices must lie in [0, {self.size})"
        # Once the buffer is full, the sum tree's own check of [0, capacity) is this one.
        if self.size < self.capacity and len(slots) and (slots.min() < 0 or slots.max() >= self.size):
            raise ValueError(message)
        try:
            self.priorities.update(slots, as_numpy(priorities))
        except IndexError as error:
            raise ValueError(message) from error

    def state_dict(self) -> dict:
        state = {**self.priorities.state_dict(), **self.contents()}
        if "contents" in state:  # the sum tree's leaves: p_i^alpha of every stored slot
            state["contents"]["priorities"] = torch.from_numpy(self.priorities.tree.values(np.arange(self.size)))
        return state

    def load_state_dict(self, state: dict) -> None:
        self.priorities.load_state_dict(state)
        self.load_contents(state)
        if "contents" in state:
            self.priorities.tree.update(np.arange(self.size), state["contents"]["priorities"].numpy())

