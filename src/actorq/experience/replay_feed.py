"""How an off-policy learner's experience reaches it: the actors' batches go through the
n-step writer into a replay, which the learner samples (with several learner ranks, each
rank samples its share through :class:`~actorq.data.learner_ranks.RankSampling`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase

from actorq.data.learner_ranks import RankSampling, share_arrivals
from actorq.data.replay.base import ReplayBuffer
from actorq.data.replay.factory import is_frames, transition_template
from actorq.algos.batches import Arrivals
from actorq.data.writer import TransitionWriter
from actorq.util.errors import ConfigError, construct


class ReplayFeed:
    """The replay, its writer and what the learner samples.

    Args:
        make_replay: builds the replay given ``template`` and ``planned_updates`` (the
            ``replay`` config group, partially applied).
        n_step: rewards summed per stored transition (the learner's ``n_step``).
        gamma: discount per step (the learner's ``gamma``).
        planned_updates: updates the run makes, each drawing one sample (a prioritized
            replay anneals ``beta`` over them).

    Attributes:
        replay: the :class:`~actorq.data.replay.base.ReplayBuffer` (after :meth:`setup`, on
            learner rank 0).
        writer: the :class:`~actorq.data.writer.TransitionWriter` that stores batches.
        sampling: what the learner samples and feeds priorities to: the replay itself, or
            with several learner ranks a :class:`~actorq.data.learner_ranks.RankSampling` of it.
    """

    kind = "replay"

    def __init__(self, make_replay: Callable[..., ReplayBuffer], n_step: int = 1, gamma: float = 0.99,
                 planned_updates: int = 0):
        self.make_replay, self.n_step, self.gamma, self.planned_updates = make_replay, n_step, gamma, planned_updates
        self.replay: ReplayBuffer | None = None
        self.writer: TransitionWriter | None = None
        self.sampling: ReplayBuffer | RankSampling | None = None
        self._saved_state: dict | None = None  # a checkpoint's replay state, until the replay exists
        self.envs = 1  # every actor worker's envs (check_actors): a frame replay keeps a ring for each

    def check_actors(self, actors: Mapping[str, Any]) -> None:
        if (actors.get("gather") or 1) > 1:
            raise ConfigError(f"actors.gather={actors['gather']} is for on-policy learners (rollouts); "
                              "a replay takes every batch as it arrives")
        self.envs = int(actors.get("num_workers", 1)) * int(actors.get("envs_per_worker", 1))

    def setup(self, rank: int, ranks: int, make_env: Callable[[], Any]) -> None:
        """Builds the replay and its writer on learner rank 0; another rank samples its share."""
        if self.sampling is not None:
            return
        if rank > 0:
            self.sampling = RankSampling(None, rank, ranks)
            return
        template = transition_template(make_env())
        if is_frames(template) and self.n_step != 1:
            raise ConfigError(f"a replay of frames stores one-step transitions: set algo.n_step=1, not {self.n_step}")
        frames = {"envs": self.envs, "gamma": self.gamma} if is_frames(template) else {}  # the frame replay's
        self.replay = construct(self.make_replay, template=template, planned_updates=self.planned_updates, **frames)
        if self._saved_state is not None:
            self.replay.load_state_dict(self._saved_state)
        self.writer = TransitionWriter(self.replay, self.n_step, self.gamma)
        self.sampling = self.replay if ranks == 1 else RankSampling(self.replay, rank, ranks)

    def actor_settings(self) -> dict[str, Any]:
        """What the actor pool is given: the writer, where the workers write the replay themselves."""
        return {"writer": self.writer if self.writer is not None and self.writer.in_workers else None}

    def receive(self, batch: TensorDictBase | Any) -> Arrivals | None:
        """Stores a batch (unless a worker stored it) and says what arrived; every learner rank
        hears rank 0's arrivals."""
        arrivals = None
        if self.writer is not None:
            if isinstance(batch, TensorDictBase):  # else ActorPool's WRITTEN: a worker stored it
                self.writer.extend(batch)
            arrivals = self.writer.arrivals()
        if isinstance(self.sampling, RankSampling):
            arrivals = share_arrivals(arrivals, self.sampling)
        return arrivals

    def calibration_observations(self, count: int) -> torch.Tensor:
        """``count`` observations drawn uniformly from the replay without replacement, leaving
        the learner's sampling state as it was."""
        return self.replay.observations(count)

    def calibration_and_held_out(self, calibration: int, held_out: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``calibration`` and ``held_out`` observations cut from one draw without replacement
        (:meth:`~actorq.data.replay.base.ReplayBuffer.observation_sets`), so that none is in
        both; a replay holding fewer gives each its share (``None`` held out when that is
        nothing)."""
        observations, held = self.replay.observation_sets(calibration, held_out)
        return observations, (held if len(held) else None)

    def has_observations(self) -> bool:
        return self.replay is not None and len(self.replay) > 0

    def draws_kept(self):
        """A context in which the replay's calibration draws leave its random state as it was."""
        return self.replay.observation_draws_kept()

    def state_dict(self) -> dict:
        return self.replay.state_dict() if self.replay is not None else {}

    def load_state_dict(self, state: dict | None) -> None:
        if self.replay is not None and state:
            self.replay.load_state_dict(state)
        else:
            self._saved_state = state or None
