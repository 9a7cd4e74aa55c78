"""The off-policy learner every algorithm shares: replay in, gradient steps out.

One Lightning "batch" is one batch of experience from the actors. ``training_step`` turns
it into n-step transitions, stores them (through an
:class:`~actorq.replay.experience.ExperienceWriter`), and runs ``update_to_data * frames``
gradient updates on replay samples. With a shared replay the actor processes store their
batches themselves and the "batch" is only a marker; the frames that arrived are counted
all the same. Subclasses only say what their networks are and what one update does
(:meth:`update`), returning named loss terms.

Attributes that callbacks rely on (documented, stable):
    actors: the :class:`~actorq.actors.pool.ActorPool` feeding this learner.
    replay: the :class:`~actorq.replay.base.ReplayBuffer`.
    writer: the :class:`~actorq.replay.experience.ExperienceWriter` that stores experience.
    frames: environment steps received so far.
    learner_steps: gradient updates done so far.
    policy: the learner-side :class:`~actorq.actors.policy.ExplorationPolicy` (fp32, live
        weights), the structure every actor runs.
"""

from __future__ import annotations

import time
from abc import abstractmethod

import lightning as L
import torch
from tensordict import TensorDictBase
from torch import nn

from actorq.actors.policy import ExplorationPolicy
from actorq.envs import EnvSpec
from actorq.replay.base import ReplayBuffer, Sample
from actorq.replay.experience import Arrivals, ExperienceWriter


class Exploration:
    """A linearly annealed exploration scale (epsilon or Gaussian sigma).

    Args:
        start: scale at frame 0.
        end: scale after ``anneal_frames`` frames.
        anneal_frames: frames over which the scale moves from ``start`` to ``end``.
    """

    def __init__(self, start: float, end: float | None = None, anneal_frames: int = 0):
        self.start = start
        self.end = start if end is None else end
        self.anneal_frames = anneal_frames

    def __call__(self, frames: int) -> float:
        if self.anneal_frames <= 0:
            return self.end
        fraction = min(1.0, frames / self.anneal_frames)
        return self.start + fraction * (self.end - self.start)


def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``target <- tau * source + (1 - tau) * target`` (``tau=1`` copies)."""
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters(), strict=True):
            t.lerp_(s, tau)


class OffPolicyLearner(L.LightningModule):
    """Base learner: experience handling, update scheduling, target networks, logging.

    Args:
        spec: the environment spec.
        exploration: actor-side exploration schedule.
        gamma: discount factor.
        n_step: rewards summed per transition.
        batch_size: transitions per gradient update.
        update_to_data: gradient updates per environment frame received.
        learning_starts: frames stored before the first update.
        target_tau: soft target update rate (1.0 with ``target_update_period`` > 1 gives
            periodic hard copies).
        target_update_period: learner steps between target updates.
        final_lr_fraction: every optimizer's learning rate falls linearly from its initial
            value to this fraction of it over the run's planned updates (1.0 keeps it
            constant). A smaller step size at the end keeps a solved policy from drifting
            away late in training, the usual way DQN loses CartPole after solving it.
    """

    action_space: str = "continuous"  # or "discrete"; checked against the env at start

    def __init__(
        self,
        spec: EnvSpec,
        exploration: Exploration,
        gamma: float = 0.99,
        n_step: int = 1,
        batch_size: int = 256,
        update_to_data: float = 1.0,
        learning_starts: int = 1000,
        target_tau: float = 0.005,
        target_update_period: int = 1,
        final_lr_fraction: float = 1.0,
    ):
        super().__init__()
        _check_positive(batch_size=batch_size, n_step=n_step, target_update_period=target_update_period)
        if update_to_data <= 0:
            raise ValueError(f"update_to_data must be positive, got {update_to_data}")
        if not 0 < target_tau <= 1:
            raise ValueError(f"target_tau must be in (0, 1], got {target_tau}")
        if not 0 <= final_lr_fraction <= 1:
            raise ValueError(f"final_lr_fraction must be in [0, 1], got {final_lr_fraction}")
        self.automatic_optimization = False
        self.spec = spec
        self.exploration = exploration
        self.gamma = gamma
        self.n_step = n_step
        self.batch_size = batch_size
        self.update_to_data = update_to_data
        self.learning_starts = learning_starts
        self.target_tau = target_tau
        self.target_update_period = target_update_period
        self.final_lr_fraction = final_lr_fraction
        self.actors = None
        self.replay: ReplayBuffer | None = None
        self.writer: ExperienceWriter | None = None
        self.frames = 0
        self.learner_steps = 0
        self._update_debt = 0.0
        self.time_collect = 0.0
        self.time_learn = 0.0
        self._batch_ready_at = None
        self._started_at = None

    # --- what an algorithm provides -------------------------------------------------

    @property
    @abstractmethod
    def behaviour_network(self) -> nn.Module:
        """The network the actors run (Q-network or deterministic actor)."""

    @abstractmethod
    def update(self, sample: Sample) -> dict[str, torch.Tensor]:
        """One gradient update; returns named, detached loss terms (``loss_*``) and metrics."""

    @abstractmethod
    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """``(target, online)`` network pairs kept in sync by :meth:`update_targets`."""

    def act(self, observation: torch.Tensor) -> torch.Tensor:
        """Deterministic (greedy) action of the fp32 learner policy for a batch."""
        with torch.no_grad():
            out = self.behaviour_network(observation.to(self.device))
        return (out.argmax(-1) if self.spec.discrete else out).cpu()

    # --- the shared loop ------------------------------------------------------------

    def attach(self, actors, replay: ReplayBuffer, writer: ExperienceWriter | None = None) -> None:
        """Connects the actor pool and the replay buffer (done by ``actorq.train``).

        ``writer`` is the one the actors were given, if they write into the replay
        themselves; otherwise the learner makes its own.
        """
        self.actors = actors
        self.replay = replay
        if writer is None:
            writer = ExperienceWriter(replay, self.n_step, self.gamma)
        self.writer = writer

    def planned_updates(self, total_frames: int) -> int:
        """Gradient updates a run of ``total_frames`` env frames makes (each draws one sample)."""
        return int(max(0, total_frames - self.learning_starts) * self.update_to_data)

    @property
    def policy(self) -> ExplorationPolicy:
        # A fresh wrapper around the live network, carrying the current exploration scale.
        return ExplorationPolicy(self.behaviour_network, self.spec, self.exploration(self.frames))

    def train_dataloader(self):
        if self.actors is None:
            raise RuntimeError("attach(actors, replay) before fitting the learner")
        return self.actors

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        return batch  # experience goes into the CPU replay buffer as it is

    def training_step(self, batch: TensorDictBase, batch_idx: int) -> None:
        started = time.perf_counter()
        if self._started_at is None:
            self._started_at = started
        if self._batch_ready_at is not None:
            self.time_collect += started - self._batch_ready_at
        if isinstance(batch, TensorDictBase):  # else ActorPool's WRITTEN: a worker stored it
            self.writer.extend(batch)
        arrivals = self.writer.arrivals()
        self.frames += arrivals.frames
        metrics = self._learn(arrivals.frames)
        self.time_learn += time.perf_counter() - started
        self._batch_ready_at = time.perf_counter()
        self._log(arrivals, metrics)

    def _learn(self, new_frames: int) -> dict[str, torch.Tensor]:
        if self.frames < self.learning_starts or len(self.replay) < self.batch_size:
            return {}
        self._update_debt += new_frames * self.update_to_data
        metrics: dict[str, torch.Tensor] = {}
        while self._update_debt >= 1:
            self._update_debt -= 1
            self.anneal_learning_rates()
            sample = self.replay.sample(self.batch_size)
            if self.device.type != "cpu":  # the replay lives in CPU memory
                sample.batch = sample.batch.to(self.device)
                sample.weights = sample.weights.to(self.device)
            metrics = self.update(sample)
            self.learner_steps += 1
            if self.learner_steps % self.target_update_period == 0:
                self.update_targets()
        return metrics

    def anneal_learning_rates(self) -> None:
        """Sets each optimizer's learning rate for the next update (see ``final_lr_fraction``)."""
        if self.final_lr_fraction == 1.0 or self.actors is None:
            return
        progress = min(1.0, self.learner_steps / max(1, self.planned_updates(self.actors.total_frames)))
        factor = 1.0 - progress * (1.0 - self.final_lr_fraction)
        optimizers = self.optimizers()
        for optimizer in optimizers if isinstance(optimizers, list) else [optimizers]:
            for group in optimizer.optimizer.param_groups:  # Lightning wraps each optimizer
                group["lr"] = group.setdefault("initial_lr", group["lr"]) * factor

    def update_targets(self) -> None:
        for target, online in self.target_pairs():
            soft_update(target, online, self.target_tau)

    def feed_priorities(self, sample: Sample, td_error: torch.Tensor) -> None:
        """Sends ``|td_error|`` back to the replay (a no-op for uniform replay)."""
        self.replay.update_priorities(sample.indices, td_error.detach().abs().cpu())

    def _log(self, arrivals: Arrivals, metrics: dict[str, torch.Tensor]) -> None:
        values = {f"train/{name}": float(value) for name, value in metrics.items()}
        if arrivals.episode_return is not None:
            values["collect/episode_return"] = arrivals.episode_return
        total_time = self.time_collect + self.time_learn
        values.update(
            {
                "collect/frames": float(self.frames),
                "collect/frames_per_s": self.frames / max(1e-9, time.perf_counter() - self._started_at),
                "train/learner_steps": float(self.learner_steps),
                "collect/exploration": self.exploration(self.frames),
                "time/collect_fraction": self.time_collect / total_time if total_time else 0.0,
                "time/learn_s": self.time_learn,
                "time/samples_per_insert": self.learner_steps * self.batch_size / max(1, self.frames),
                # Lightning uses a logged "step" as the x-axis: env frames.
                "step": float(self.frames),
            }
        )
        self.log_dict(values, on_step=True, on_epoch=False, batch_size=1)

    # --- checkpoints ----------------------------------------------------------------

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["actorq"] = {
            "config": getattr(self, "run_config", None),
            "frames": self.frames,
            "learner_steps": self.learner_steps,
            "replay": self.replay.state_dict() if self.replay is not None else {},
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("actorq", {})
        self.frames = state.get("frames", 0)
        self.learner_steps = state.get("learner_steps", 0)
        if self.replay is not None and state.get("replay"):
            # The sampling state (beta's progress, generators); transitions are not saved.
            self.replay.load_state_dict(state["replay"])


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")

