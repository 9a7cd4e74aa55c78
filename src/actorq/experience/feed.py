"""What the experience pipeline asks of a feed, the part that decides how the actors'
batches reach the learner: :class:`~actorq.experience.replay_feed.ReplayFeed` (into a replay,
sampled by off-policy learners) or :class:`~actorq.experience.rollout_feed.RolloutFeed` (each
rollout as it arrives, for on-policy learners)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch

from actorq.algos.batches import Arrivals


class Feed(Protocol):
    """How batches from the actors reach the learner, and what a push calibrates on."""

    kind: str
    """``"replay"`` or ``"rollout"``."""

    def check_actors(self, actors: Mapping[str, Any]) -> None:
        """A ``ConfigError`` for ``actors`` settings this feed cannot take."""

    def setup(self, rank: int, ranks: int, make_env: Callable[[], Any]) -> None:
        """Builds what the feed needs on learner rank ``rank`` of ``ranks``."""

    def actor_settings(self) -> dict[str, Any]:
        """What the actor pool is given on top of the run's actor settings."""

    def receive(self, batch: Any) -> Arrivals | None:
        """Takes one batch from the actors and says what arrived with it."""

    def calibration_observations(self, count: int) -> torch.Tensor:
        """``count`` observations the actors' copy calibrates on."""

    def calibration_and_held_out(self, calibration: int, held_out: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Observations to calibrate on and others, none of them among the first, to measure
        the copy's fidelity on (``None``: none held out)."""

    def has_observations(self) -> bool:
        """Whether there are observations to calibrate on yet."""

    def draws_kept(self) -> AbstractContextManager:
        """A context in which calibration draws leave the learner's random state as it was."""

    def state_dict(self) -> dict:
        """What a checkpoint keeps of the feed."""

    def load_state_dict(self, state: dict | None) -> None:
        """Restores :meth:`state_dict` (now, or once the feed is set up)."""
