"""The run's frame clock: environment frames received so far, and the actors' exploration
scale at them.

One object, shared by its two readers instead of each reading the other: the learner owns
and advances it (:attr:`actorq.algos.base.Learner.clock`), and ``train()`` hands
it to the experience pipeline, which starts (or, after a resume, restarts) the actors where
the run stands and sets their exploration scale from it.

Example:
    >>> clock = FrameClock(lambda frames: max(0.1, 1.0 - frames / 1000))
    >>> clock.frames = 500
    >>> clock.frames, clock.noise_scale
    (500, 0.5)
"""

from __future__ import annotations

from collections.abc import Callable


class FrameClock:
    """Frames received so far and the exploration schedule read at them.

    Args:
        exploration: the actors' exploration scale (epsilon or Gaussian sigma) at a frame count.
    """

    def __init__(self, exploration: Callable[[int], float]):
        self.exploration = exploration
        self.frames = 0

    @property
    def noise_scale(self) -> float:
        """The actors' exploration scale at the frames received so far."""
        return self.exploration(self.frames)
