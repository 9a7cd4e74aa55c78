"""The off-policy learner family: the actors' batches go into a replay, updates sample from it.

One Lightning "batch" is one batch of experience from the actors. ``training_step`` turns
it into n-step transitions, stores them (through the experience pipeline's
:class:`~actorq.data.writer.TransitionWriter`), and runs ``update_to_data * frames``
gradient updates on replay samples. With a shared replay the actor processes store their
batches themselves and the "batch" is only a marker; the frames that arrived are counted
all the same. Subclasses only say what their networks and optimizers are and what one
update does (:meth:`OffPolicyLearner.update`), returning named loss terms; the logged value
of each term is its mean over the updates of one batch.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Protocol

import torch
from torch import nn

from actorq.algos.base import Exploration, Learner, check_positive
from actorq.envs import EnvSpec
from actorq.algos.batches import Sample
from actorq.util.errors import ConfigError

N_STEP_ON_VECTORS = 3
"""``n_step=None`` on vector observations: 3-step returns (Rainbow's; DQN's default here)."""


class Sampling(Protocol):
    """What the learner draws updates from: a replay, or its share of one
    (:class:`actorq.data.learner_ranks.RankSampling`)."""

    def __len__(self) -> int: ...

    def sample(self, batch_size: int) -> Sample: ...

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None: ...

    def kept_transitions(self) -> int: ...


class OffPolicyLearner(Learner):
    """Base off-policy learner: replay, n-step, update-to-data, learning starts, priorities.

    Args:
        spec: the environment spec.
        exploration: actor-side exploration schedule.
        gamma: discount factor.
        n_step: rewards summed per transition; ``None``: 1 on frames (a replay of frames
            stores one-step transitions), :data:`N_STEP_ON_VECTORS` otherwise. More than 1 on
            frames is refused.
        batch_size: transitions per gradient update.
        update_to_data: gradient updates per environment frame received.
        learning_starts: frames stored before the first update; a run resumed with a replay
            that came back with fewer transitions (``replay.checkpoint=false``, or a replay of
            frames) stores what it lacks again first (:attr:`learning_starts_at`).
        target_tau: soft target update rate (1.0 with ``target_update_period`` > 1 gives
            periodic hard copies).
        target_update_period: learner steps between target updates.
        final_lr_fraction: see :class:`~actorq.algos.base.Learner`.
    """

    experience_kind = "replay"
    # The network's output before exploration, so the learner can check the actors ran the
    # version it pushed (a stochastic policy, SAC's, records nothing).
    records = ("output", "policy_version", "worker")
    push_every_n_steps = 100  # the actors' policy may trail the learner's: replay updates never assume it
    init_random_frames = 1000  # random actions fill the replay before the policy means anything

    def __init__(
        self,
        spec: EnvSpec,
        exploration: Exploration,
        gamma: float = 0.99,
        n_step: int | None = 1,
        batch_size: int = 256,
        update_to_data: float = 1.0,
        learning_starts: int = 1000,
        target_tau: float = 0.005,
        target_update_period: int = 1,
        final_lr_fraction: float = 1.0,
    ):
        super().__init__(spec, exploration, gamma=gamma, final_lr_fraction=final_lr_fraction)
        # batch_size, n_step and learning_starts are checked with the run config (actorq.run.checks)
        check_positive(target_update_period=target_update_period, update_to_data=update_to_data)
        check_positive(target_tau=target_tau)
        if not target_tau <= 1:
            raise ValueError(f"target_tau must be in (0, 1], got {target_tau}")
        if n_step is None:
            n_step = 1 if spec.pixels else N_STEP_ON_VECTORS
        if spec.pixels and n_step != 1:
            raise ConfigError(f"a replay of frames stores one-step transitions: set algo.n_step=1 (or null), not {n_step}")
        self.n_step = n_step
        self.batch_size = batch_size
        self.update_to_data = update_to_data
        self.learning_starts = learning_starts
        self.learning_starts_at = learning_starts
        """The frames from which updates run: :attr:`learning_starts`, later after a resume."""
        self.target_tau = target_tau
        self.target_update_period = target_update_period
        self._update_debt = 0.0

    # --- what an algorithm provides -------------------------------------------------

    @abstractmethod
    def update(self, sample: Sample) -> dict[str, torch.Tensor]:
        """One gradient update; returns named, detached loss terms (``loss_*``) and metrics."""

    @abstractmethod
    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """``(target, online)`` network pairs kept in sync by :meth:`update_targets`."""

    def feed_priorities(self, sample: Sample, td_error: torch.Tensor) -> None:
        """Sends ``|td_error|`` back to the replay (a no-op for uniform replay)."""
        self.experience.sampling.update_priorities(sample.indices, td_error.detach().abs().cpu())

    # --- the family's loop ----------------------------------------------------------

    def planned_updates(self, total_frames: int) -> int:
        """Gradient updates a run of ``total_frames`` env frames makes (each draws one sample)."""
        return int(max(0, total_frames - self.learning_starts) * self.update_to_data)

    def learn(self, batch: Any, new_frames: int) -> dict[str, torch.Tensor]:
        """Runs the updates the batch's frames pay for (the batch itself is in the replay
        already); returns each term's mean over them."""
        replay = self.experience.sampling
        if self.frames < self.learning_starts_at or len(replay) < self.batch_size:
            return {}
        self._update_debt += new_frames * self.update_to_data
        totals: dict[str, torch.Tensor] = {}
        counts: dict[str, int] = {}
        while self._update_debt >= 1:
            self._update_debt -= 1
            sample = replay.sample(self.batch_size)
            if self.device.type != "cpu":  # the replay lives in CPU memory
                sample.batch = sample.batch.to(self.device)
                sample.weights = sample.weights.to(self.device)
            for name, value in self.update(sample).items():
                totals[name] = totals.get(name, 0.0) + value
                counts[name] = counts.get(name, 0) + 1
            self.learner_steps += 1
            self.step_schedulers()
            if self.learner_steps % self.target_update_period == 0:
                self.update_targets()
        return {name: total / counts[name] for name, total in totals.items()}

    def update_targets(self) -> None:
        """Moves every target network :attr:`target_tau` of the way to its online network."""
        for target, online in self.target_pairs():
            soft_update(target, online, self.target_tau)

    def log_values(self) -> dict[str, float]:
        return {"time/samples_per_insert": self.learner_steps * self.batch_size / max(1, self.frames)}

    def counters(self) -> dict[str, Any]:
        sampling = getattr(self.experience, "sampling", None)
        return {"update_debt": self._update_debt, "learning_starts_at": self.learning_starts_at,
                "replay_kept": sampling.kept_transitions() if sampling is not None else 0}

    def restore_counters(self, state: dict[str, Any]) -> None:
        """The update debt, and when updates start again: a replay that comes back with fewer
        than :attr:`learning_starts` transitions (``replay_kept``: none unless the checkpoint
        kept the replay's contents) first stores what it lacks, so that the resumed run does
        not update at once on the few transitions of its first batches."""
        self._update_debt = state.get("update_debt", 0.0)
        lacking = max(0, self.learning_starts - state.get("replay_kept", 0))
        self.learning_starts_at = max(state.get("learning_starts_at", self.learning_starts), self.frames + lacking)


def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``target <- tau * source + (1 - tau) * target`` (``tau=1`` copies), one fused op over
    all the parameters."""
    targets, sources = list(target.parameters()), list(source.parameters())
    if [t.shape for t in targets] != [s.shape for s in sources]:
        raise ValueError(f"target and source networks differ: {len(targets)} vs {len(sources)} parameters")
    with torch.no_grad():
        torch._foreach_lerp_(targets, sources, tau)
