"""What a learner receives from its experience source: a sampled batch of transitions
(:class:`Sample`, from a replay) and a count of the experience that arrived with it
(:class:`Arrivals`). They live with the learning math, which the data path below it fills
(``actorq.data``), so a learner imports nothing of replays or writers."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict


@dataclass
class Sample:
    """A sampled batch.

    Attributes:
        batch: transitions, batch size ``[B]``.
        indices: storage indices, for :meth:`ReplayBuffer.update_priorities`.
        weights: importance-sampling weights (all ones for uniform replay).
    """

    batch: TensorDict
    indices: torch.Tensor
    weights: torch.Tensor


@dataclass(frozen=True)
class Arrivals:
    """Experience that arrived since the previous :meth:`TransitionWriter.arrivals`.

    Attributes:
        frames: environment steps (one transition each).
        episodes: episodes that ended.
        return_sum: sum of those episodes' returns.
    """

    frames: int
    episodes: int
    return_sum: float

    @property
    def episode_return(self) -> float | None:
        """Mean return of the episodes that ended, or ``None`` if none did."""
        return self.return_sum / self.episodes if self.episodes else None
