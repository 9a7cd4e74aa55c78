"""``Every``: the one "every N" schedule of the callbacks, on a counter that only grows (env
frames, learner steps, seconds of wall-clock).

Two ways to move on once it is due: :meth:`Every.skip_past` keeps a fixed grid (evaluations
and checkpoints at 10k, 20k, ... frames, whatever size the batches that cross them);
:meth:`Every.restart` counts the next period from now (a push ``every_n_steps`` after the
last one).

Example:
    >>> every = Every(1000)
    >>> every.due(999), every.due(1050)
    (False, True)
    >>> every.skip_past(1050); every.next_at
    2000
    >>> every.restart(2100); every.next_at
    3100
    >>> Every(None).due(10**9)  # no period: never due
    False
"""

from __future__ import annotations


class Every:
    """Due once ``now`` reaches :attr:`next_at`.

    Args:
        period: the counter's units between two due points; ``None`` is never due.
        first: the first due point (default: ``period``).
    """

    def __init__(self, period: float | None, first: float | None = None):
        self.period = period
        self.next_at = (period or 0) if first is None else first

    def due(self, now: float) -> bool:
        return self.period is not None and now >= self.next_at

    def skip_past(self, now: float) -> None:
        """The next due point is the first one of the grid after ``now``."""
        while self.next_at <= now:
            self.next_at += self.period

    def restart(self, now: float) -> None:
        """The next due point is one period after ``now``."""
        self.next_at = now + self.period
