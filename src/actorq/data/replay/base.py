"""The replay interface the learner talks to; uniform and prioritized buffers implement it.

A transition is a flat TensorDict row with the keys of :data:`TRANSITION_KEYS`, as produced
by :func:`actorq.data.nstep.nstep_transitions`.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator

import torch
from tensordict import TensorDict

from actorq.algos.batches import Sample

TRANSITION_KEYS = ("observation", "action", "reward", "next_observation", "discount")


class ReplayBuffer(ABC):
    """Insert batches of transitions, sample batches, feed back priorities.

    ``state_dict()`` holds the sampling state; with ``save_contents`` (``replay.checkpoint``)
    also the transitions, their priorities and the write position, as plain tensors.
    """

    capacity: int
    save_contents: bool = False

    @abstractmethod
    def extend(self, transitions: TensorDict) -> None:
        """Stores a batch of transitions (batch size ``[N]``), overwriting the oldest."""

    @abstractmethod
    def sample(self, batch_size: int) -> Sample:
        """Draws ``batch_size`` transitions."""

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:  # noqa: B027
        """Feeds back new priorities (e.g. |TD error|); a no-op for uniform replay."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of transitions stored."""

    def kept_transitions(self) -> int:
        """Transitions a checkpoint of this replay keeps, which a run resumed from it starts
        with: all of them with ``save_contents``, else none."""
        return len(self) if self.save_contents else 0

    def observations(self, count: int) -> torch.Tensor:
        """``count`` stored observations drawn uniformly without replacement (every one when the
        replay holds ``count`` or fewer), leaving the sampling state (the generator, a
        prioritized buffer's beta) untouched: for calibrating quantization."""
        size = len(self)
        if size == 0:
            raise RuntimeError("cannot draw observations from an empty replay buffer")
        if getattr(self, "_peek_generator", None) is None:
            self._peek_generator = torch.Generator().manual_seed(size)
        indices = distinct_indices(size, min(count, size), self._peek_generator)
        return self.storage.read(indices)["observation"]

    def observation_sets(self, *counts: int) -> tuple[torch.Tensor, ...]:
        """Sets of ``counts[i]`` stored observations, cut from one draw of :meth:`observations`
        (without replacement here, so no stored transition is in two sets); where the replay
        holds fewer than their sum, each set gets its share of what it holds (:func:`shares`)."""
        sizes = shares(counts, len(self))
        return self.observations(sum(sizes)).split(sizes)

    @contextlib.contextmanager
    def observation_draws_kept(self) -> Iterator[None]:
        """Draws of :meth:`observations` inside this block leave the ones after it as they
        would have been without them."""
        generator = getattr(self, "_peek_generator", None)
        state = generator.get_state() if generator is not None else None
        try:
            yield
        finally:
            if generator is None:
                self._peek_generator = None
            else:
                generator.set_state(state)

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:  # noqa: B027
        pass


def distinct_indices(size: int, count: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` distinct integers of ``range(size)`` (``count <= size``), every such set as
    likely: a permutation where they are a large share of ``size``, else distinct values of
    uniform draws, at a cost that grows with ``count``, not ``size``."""
    if 4 * count >= size:
        return torch.randperm(size, generator=generator)[:count]
    while True:
        distinct = torch.unique(torch.randint(size, (2 * count,), generator=generator))
        if len(distinct) >= count:
            return distinct[torch.randperm(len(distinct), generator=generator)[:count]]


def shares(counts: tuple[int, ...], size: int) -> list[int]:
    """``counts`` as they are where they add up to ``size`` or less, else each cut to its share
    of ``size`` (the first takes what rounding leaves).

    Example:
        >>> shares((512, 256), 1000), shares((512, 256), 10)
        ([512, 256], [7, 3])
    """
    total = sum(counts)
    if total <= size:
        return list(counts)
    cut = [count * size // total for count in counts]
    cut[0] += size - sum(cut)
    return cut
