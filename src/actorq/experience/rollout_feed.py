"""How an on-policy learner's experience reaches it: each batch from the actors is a rollout
``[envs, T]``, handed over as it is and kept only until the next one (calibration reads the
last rollout, the fidelity measurement the one before it)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase

from actorq.algos.batches import Arrivals
from actorq.data.writer import ended_episode_returns


class RolloutFeed:
    """The last two rollouts, for calibration and for measuring a copy's fidelity."""

    kind = "rollout"

    def __init__(self):
        self.last: TensorDictBase | None = None
        self.previous: TensorDictBase | None = None

    def check_actors(self, actors: Mapping[str, Any]) -> None:
        """Any collection and gathering suit rollouts."""

    def setup(self, rank: int, ranks: int, make_env: Callable[[], Any]) -> None:
        """Nothing to build: a rollout is used as it arrives."""

    def actor_settings(self) -> dict[str, Any]:
        # A rollout waiting for the learner ages by a policy version per batch trained: none
        # waits, each worker collects its next one while the learner trains (one version behind).
        return {"waiting_batches": 0}

    def receive(self, batch: TensorDictBase) -> Arrivals:
        self.previous, self.last = self.last, batch
        returns = ended_episode_returns(batch)
        return Arrivals(batch.numel(), len(returns), float(returns.sum()))

    def calibration_observations(self, count: int) -> torch.Tensor:
        """``count`` of the last rollout's observations, each at most once (the whole rollout
        when it has ``count`` steps or fewer, so its extremes are in the calibrated ranges)."""
        return _without_replacement(_flat_observations(self.last), count)

    def calibration_and_held_out(self, calibration: int, held_out: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`calibration_observations`, and ``held_out`` of the rollout before the last
        one's, each at most once (``None`` before there is one)."""
        observations = self.calibration_observations(calibration)
        held = None if self.previous is None else _without_replacement(_flat_observations(self.previous), held_out)
        return observations, held

    def has_observations(self) -> bool:
        return self.last is not None

    def draws_kept(self):
        return contextlib.nullcontext()

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict | None) -> None:
        """A rollout is not kept across a checkpoint."""


def _flat_observations(batch: TensorDictBase) -> torch.Tensor:
    """The batch's observations as one row each: ``[steps, *observation_shape]``."""
    observations = batch["observation"]
    return observations.reshape(-1, *observations.shape[batch.ndim:])


def _without_replacement(observations: torch.Tensor, count: int) -> torch.Tensor:
    """``count`` of ``observations`` drawn without replacement (all of them if fewer)."""
    if len(observations) <= count:
        return observations
    return observations[torch.randperm(len(observations))[:count]]
