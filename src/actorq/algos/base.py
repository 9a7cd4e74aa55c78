"""What every learner shares, whichever family it belongs to.

actorq has two learner families, each a base class beside the other (SB3's
``OffPolicyAlgorithm`` / ``OnPolicyAlgorithm`` split):

- :class:`~actorq.algos.off_policy.OffPolicyLearner` (DQN, DDPG, TD3, SAC, D4PG): the
  actors' batches go into a replay, and updates sample from it.
- :class:`~actorq.algos.on_policy.OnPolicyLearner` (A2C, PPO): each batch is a rollout
  ``[envs, T]`` straight from the actors, used once, with what the learner declared the
  actors must record (the log-probability of each action under the actors' own policy,
  and the policy version they acted with).

:class:`Learner` is the base of both: the networks the actors run a copy of, optimizers and
their learning-rate schedule, the finite-loss guard, the frame clock,
logging and the counters a checkpoint keeps. A learner declares what it needs of its
experience in two class attributes: :attr:`Learner.experience_kind` (``"replay"`` or
``"rollout"``) and :attr:`Learner.records` (what the actors record with each step). A family
also declares how its actors run: :attr:`Learner.push_every_n_steps` (learner steps between
two pushes of its policy, ``callbacks.push.every_n_steps`` unless a run sets it) and
:attr:`Learner.init_random_frames` (the actors' first frames with random actions,
``actors.init_random_frames`` unless a run sets it); ``actorq.train`` wires them in.

A learner is complete at construction. ``train()`` then hands it the experience pipeline it
learns from (:meth:`Learner.learn_from`): an :class:`ExperienceSource`, the few things the
learner uses of :class:`actorq.experience.Experience`. The learner never reaches it through
the Trainer, and the experience pipeline never reads the learner: what both need (the frames
received, the exploration scale at them) is the learner's :attr:`clock`, which ``train()``
hands to both.

Attributes that callbacks rely on (documented, stable):
    experience: the :class:`ExperienceSource` it learns from (after :meth:`learn_from`).
    clock: the :class:`~actorq.util.clock.FrameClock`: frames received, exploration scale at them.
    frames: environment steps received so far (``clock.frames``).
    learner_steps: gradient updates done so far.
    behaviour_network: the fp32 network the actors run a copy of.
    noise_scale: the actors' exploration scale now (epsilon or Gaussian sigma).
    stochastic: whether the actors sample from the network instead of adding noise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from abc import abstractmethod
from typing import Any, Protocol

import lightning as L
import torch
from tensordict import TensorDictBase
from torch import nn

from actorq.util.clock import FrameClock
from actorq.envs import EnvSpec
from actorq.util.finite import check_finite_loss
from actorq.algos.ranks import ranks_in_sync
from actorq.algos.batches import Arrivals
from actorq.algos.resume import extend_to_budget, rng_states, set_rng_states

EXPERIENCE_KINDS = ("replay", "rollout")
"""What a learner learns from: transitions sampled from a replay, or whole rollouts."""


class Exploration:
    """A linearly annealed exploration scale (epsilon or Gaussian sigma).

    Args:
        start: scale at frame 0.
        end: scale after ``anneal_frames`` frames.
        anneal_frames: frames over which the scale moves from ``start`` to ``end``.
    """

    def __init__(self, start: float, end: float | None = None, anneal_frames: int = 0):
        for name, value in (("start", start), ("end", end if end is not None else start)):
            if not value >= 0:
                raise ValueError(f"exploration.{name} must be >= 0, got {value}")
        if anneal_frames < 0:
            raise ValueError(f"exploration.anneal_frames must be >= 0, got {anneal_frames}")
        self.start = start
        self.end = start if end is None else end
        self.anneal_frames = anneal_frames

    def __call__(self, frames: int) -> float:
        if self.anneal_frames <= 0:
            return self.end
        fraction = min(1.0, frames / self.anneal_frames)
        return self.start + fraction * (self.end - self.start)


def adam(params, lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam with torch's fused kernel: one pass over all the parameters instead of a loop of
    small ops. Same update; on a wide MLP its step is several times faster on a CPU thread
    (``actorq bench learner`` measures the gain)."""
    return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)


class LinearDecay:
    """Learning-rate factor for ``LambdaLR``: 1 at update 0, ``final_fraction`` after
    ``updates`` updates, linear in between (a class, so the scheduler's state pickles).

    Example:
        >>> decay = LinearDecay(updates=100, final_fraction=0.0)
        >>> decay(0), decay(50), decay(100), decay(200)
        (1.0, 0.5, 0.0, 0.0)
    """

    def __init__(self, updates: int, final_fraction: float):
        self.updates = max(1, int(updates))
        self.final_fraction = final_fraction

    def __call__(self, step: int) -> float:
        progress = min(1.0, step / self.updates)
        return 1.0 - progress * (1.0 - self.final_fraction)


class ExperienceSource(Protocol):
    """What the learner uses of its experience pipeline (:class:`actorq.experience.Experience`).

    Attributes:
        total_frames: env frames the run collects (the learning-rate schedule is planned over them).
        frames_per_batch: env frames in each batch the learner receives.
        sampling: what off-policy updates sample from and priorities go back to (``None``
            before fit, and for rollouts).
        policy_version: the version of the policy last pushed to the actors (0 before
            the first push).
    """

    total_frames: int
    frames_per_batch: int
    sampling: Any
    policy_version: int

    def receive(self, batch: Any) -> Arrivals:
        """Takes a batch of experience (stores it, unless a worker stored it); says what arrived."""

    def actor_counters(self) -> dict[str, int]:
        """``dropped_frames`` and ``restarts`` of the actors so far (empty before they start)."""


class Learner(L.LightningModule):
    """The base of both learner families: networks, optimizers, logging, counters.

    A family says what one batch of experience pays for (:meth:`learn`) and how many updates
    a run of a given length plans (:meth:`planned_updates`); an algorithm says what its
    networks and optimizers are and what one update does.

    Args:
        spec: the environment spec.
        exploration: actor-side exploration schedule (``None``: the actors add none, as an
            on-policy learner's sample from the policy itself).
        gamma: discount factor.
        final_lr_fraction: every optimizer's learning rate falls linearly from its initial
            value to this fraction of it over the run's planned updates (1.0 keeps it
            constant), through a ``LambdaLR`` scheduler per optimizer. A smaller step size
            at the end keeps a solved policy from drifting away late in training, the usual
            way DQN loses CartPole after solving it.
    """

    action_space: str = "continuous"  # or "discrete", or "any"; checked against the env at start
    stochastic: bool = False  # the actors act with behaviour_network.sample() instead of adding noise
    experience_kind: str = "replay"  # or "rollout" (EXPERIENCE_KINDS)
    records: tuple[str, ...] = ()  # what the actors record with each step besides the action (actorq.actors.policy.RECORDS)
    push_every_n_steps: int = 100  # learner steps between two pushes of the policy to the actors
    init_random_frames: int = 1000  # the actors' first frames with uniformly random actions

    def __init__(self, spec: EnvSpec, exploration: Exploration | None = None, gamma: float = 0.99,
                 final_lr_fraction: float = 1.0):
        super().__init__()
        check_number(gamma=gamma, final_lr_fraction=final_lr_fraction)
        if not 0 < gamma <= 1:
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        if not 0 <= final_lr_fraction <= 1:
            raise ValueError(f"final_lr_fraction must be in [0, 1], got {final_lr_fraction}")
        self.automatic_optimization = False
        self.spec = spec
        self.clock = FrameClock(exploration if exploration is not None else Exploration(0.0))
        self.experience: ExperienceSource | None = None
        self.gamma = gamma
        self.final_lr_fraction = final_lr_fraction
        self.learner_steps = 0
        self.time_collect = 0.0
        self.time_learn = 0.0
        self._batch_ready_at = None
        self._started_at = None
        self.wall_clock_before = 0.0  # seconds of training before a resume
        self._fit_started_at = None
        self._frames_at_start = 0
        self.learner_ranks: dict | None = None  # set at the end of fit (see ranks_in_sync)

    # --- what an algorithm provides -------------------------------------------------

    @property
    @abstractmethod
    def behaviour_network(self) -> nn.Module:
        """The network the actors run (Q-network, deterministic actor or policy): a policy
        network with an MLP ``trunk`` (an ``nn.Sequential``) and a ``head`` (see
        :func:`check_policy_network`)."""

    @abstractmethod
    def make_optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers, in the order the algorithm's update unpacks ``self.optimizers()``."""

    def learn(self, batch: Any, new_frames: int) -> dict[str, torch.Tensor]:
        """Runs the updates one batch of experience pays for; returns each logged term."""

    @abstractmethod
    def planned_updates(self, total_frames: int) -> int:
        """Gradient updates a run of ``total_frames`` env frames makes."""

    def counters(self) -> dict[str, Any]:
        """This family's counters a checkpoint keeps, beyond the shared ones."""
        return {}

    def restore_counters(self, state: dict[str, Any]) -> None:
        """Restores what :meth:`counters` saved (missing keys keep their defaults)."""

    def log_values(self) -> dict[str, float]:
        """This family's own per-batch metrics."""
        return {}

    def summary_fields(self) -> dict[str, Any]:
        """What this learner adds to ``summary.json`` (e.g. PPO's behaviour correction)."""
        return {}

    def act(self, observation: torch.Tensor) -> torch.Tensor:
        """Deterministic (greedy) action of the fp32 learner policy for a batch."""
        with torch.no_grad():
            out = self.behaviour_network(observation.to(self.device))
        return (out.argmax(-1) if self.spec.discrete else out).cpu()

    # --- what variants share --------------------------------------------------------

    def optimize(self, optimizer, loss: torch.Tensor | Iterable[torch.Tensor], max_grad_norm: float = 0.0) -> None:
        """``zero_grad``, backward through Lightning (precision plugins apply), optional
        gradient-norm clipping, ``step``; a non-finite loss stops training
        (:mod:`actorq.util.finite`). ``loss`` may come in parts (an iterable, each part
        computed as it is taken): their gradients add up before the one step, and each
        part's activations are freed before the next is computed."""
        parts = iter((loss,) if isinstance(loss, torch.Tensor) else loss)
        part = next(parts)
        check_finite_loss(part, self, optimizer, self.learner_steps)  # before zero_grad: the last gradients show
        optimizer.zero_grad()
        self.manual_backward(part)
        for part in parts:
            check_finite_loss(part, self, optimizer, self.learner_steps)
            self.manual_backward(part)
        if max_grad_norm > 0:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            nn.utils.clip_grad_norm_(params, max_grad_norm)
        optimizer.step()

    # --- the shared loop ------------------------------------------------------------

    def learn_from(self, experience: ExperienceSource) -> None:
        """The experience pipeline this learner receives batches from."""
        self.experience = experience

    @property
    def exploration(self) -> Exploration:
        """The actors' exploration schedule."""
        return self.clock.exploration

    @property
    def frames(self) -> int:
        """Environment frames received so far."""
        return self.clock.frames

    @frames.setter
    def frames(self, frames: int) -> None:
        self.clock.frames = frames

    @property
    def noise_scale(self) -> float:
        """The actors' exploration scale at the frames received so far."""
        return self.clock.noise_scale

    def configure_optimizers(self):
        optimizers = self.make_optimizers()
        if self.final_lr_fraction == 1.0:  # constant rates: no scheduler to step per update
            return optimizers
        planned = self.planned_updates(self.experience.total_frames)
        schedulers = [
            torch.optim.lr_scheduler.LambdaLR(optimizer, LinearDecay(planned, self.final_lr_fraction))
            for optimizer in optimizers
        ]
        return optimizers, schedulers

    def training_step(self, batch: TensorDictBase, batch_idx: int) -> None:
        started = time.perf_counter()
        if self._started_at is None:
            self._started_at, self._frames_at_start = started, self.frames
        if self._batch_ready_at is not None:
            self.time_collect += started - self._batch_ready_at
        arrivals = self.experience.receive(batch)
        self.frames += arrivals.frames
        metrics = self.learn(batch, arrivals.frames)
        self.time_learn += time.perf_counter() - started
        self._batch_ready_at = time.perf_counter()
        self._log(arrivals, metrics)

    def step_schedulers(self) -> None:
        """Steps every learning-rate scheduler once (once per update)."""
        schedulers = self.lr_schedulers()
        for scheduler in schedulers if isinstance(schedulers, list) else [schedulers]:
            if scheduler is not None:
                scheduler.step()

    def _log(self, arrivals: Arrivals, metrics: dict[str, torch.Tensor]) -> None:
        values = {f"train/{name}": float(value) for name, value in metrics.items()}
        if arrivals.episode_return is not None:
            values["collect/episode_return"] = arrivals.episode_return
        total_time = self.time_collect + self.time_learn
        values.update(
            {
                "collect/frames": float(self.frames),
                "collect/frames_per_s": (self.frames - self._frames_at_start)
                / max(1e-9, time.perf_counter() - self._started_at),
                "train/learner_steps": float(self.learner_steps),
                "collect/exploration": self.noise_scale,
                "time/collect_fraction": self.time_collect / total_time if total_time else 0.0,
                "time/learn_s": self.time_learn,
                **self.log_values(),
                # Lightning uses a logged "step" as the x-axis: env frames.
                "step": float(self.frames),
            }
        )
        counters = self.experience.actor_counters()
        if counters:  # nothing lost, nothing restarted in a healthy run
            values["collect/dropped_frames"] = float(counters["dropped_frames"])
            values["collect/actor_restarts"] = float(counters["restarts"])
        self.log_dict(values, on_step=True, on_epoch=False, batch_size=1)

    # --- checkpoints ----------------------------------------------------------------

    # Networks, target networks, optimizers and schedulers are saved by Lightning; these are
    # the counters a resumed run continues from, and this process's random states.

    def on_fit_start(self) -> None:
        if self.experience is None:
            raise RuntimeError(f"{type(self).__name__} has no experience to learn from: call "
                               "learner.learn_from(experience) before trainer.fit (actorq.train does)")
        self._fit_started_at = time.perf_counter()

    def on_train_end(self) -> None:
        if self.trainer.world_size > 1:  # every rank took part in every update: say so
            self.learner_ranks = ranks_in_sync([self], self.learner_steps)
        else:
            self.learner_ranks = {"ranks": 1, "learner_steps": [self.learner_steps], "max_weight_difference": None}

    @property
    def wall_clock(self) -> float:
        """Seconds of training so far, the time before a resume included."""
        running = time.perf_counter() - self._fit_started_at if self._fit_started_at is not None else 0.0
        return self.wall_clock_before + running

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["actorq"] = {"frames": self.frames, "learner_steps": self.learner_steps,
                                "time_collect": self.time_collect, "time_learn": self.time_learn,
                                "wall_clock": self.wall_clock, "rng": rng_states(), **self.counters()}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("actorq", {})
        self.frames = state.get("frames", 0)
        self.learner_steps = state.get("learner_steps", 0)
        self.time_collect = state.get("time_collect", 0.0)
        self.time_learn = state.get("time_learn", 0.0)
        self.wall_clock_before = state.get("wall_clock", 0.0)
        self.restore_counters(state)
        if "rng" in state:
            set_rng_states(state["rng"])
        if self.experience is not None:  # restoring a run: it may go on to a larger budget
            total = self.experience.total_frames
            extend_to_budget(checkpoint, total, self.planned_updates(total))


def check_policy_network(network: nn.Module, stochastic: bool = False) -> None:
    """The contract every policy network meets, so it can be quantized and run by actors:
    ``network.trunk`` is an ``nn.Sequential`` of ``Linear`` / ``LayerNorm`` / activation
    modules, ``network.head`` a full-precision module, ``network(obs)`` equals
    ``head(trunk(obs))`` and, for stochastic policies, ``network.head.sample(features)``
    draws an action.

    Raises:
        TypeError: naming what is missing.

    Example:
        >>> from actorq.algos.networks import QNetwork
        >>> from actorq.envs import EnvSpec
        >>> check_policy_network(QNetwork(EnvSpec(obs_dim=4, discrete=True, num_actions=2), (8,)))
        >>> check_policy_network(nn.Linear(4, 2))
        Traceback (most recent call last):
        ...
        TypeError: a policy network needs a `trunk` (nn.Sequential) and a `head` module; Linear has neither
    """
    name = type(network).__name__
    trunk, head = getattr(network, "trunk", None), getattr(network, "head", None)
    if not isinstance(trunk, nn.Sequential) or not isinstance(head, nn.Module):
        raise TypeError(f"a policy network needs a `trunk` (nn.Sequential) and a `head` module; {name} has neither"
                        if trunk is None and head is None else
                        f"a policy network needs a `trunk` (nn.Sequential) and a `head` module; {name} has "
                        f"trunk={type(trunk).__name__}, head={type(head).__name__}")
    if stochastic and not hasattr(head, "sample"):
        raise TypeError(f"a stochastic policy's head needs sample(features); {type(head).__name__} has none")


def check_number(**values: float) -> None:
    """Raises ``ValueError`` naming the first value that is not a finite real number.

    >>> check_number(lr=float("inf"))
    Traceback (most recent call last):
    ...
    ValueError: lr must be a finite number, got inf
    """
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")


def check_positive(**values: float) -> None:
    """Raises ``ValueError`` naming the first value that is not a finite number > 0."""
    check_number(**values)
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value}")
