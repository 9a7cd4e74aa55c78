"""The experience pipeline the Trainer owns: environment, actor pool, and how the actors'
batches feed the learner.

:class:`Experience` is a ``LightningDataModule`` fed in the learner family's way
(:attr:`actorq.algos.base.Learner.experience_kind`): a
:class:`~actorq.experience.replay_feed.ReplayFeed`, where the actors' batches go into a replay
the learner samples from, or a :class:`~actorq.experience.rollout_feed.RolloutFeed`, where each
batch is handed to the learner as it is, and nothing is kept. What the actors run is an
:class:`ExperienceSpec`. ``trainer.fit(learner, datamodule=experience)``
builds the replay and the n-step writer (a replay feed) in :meth:`Experience.setup`, starts the actor pool in
:meth:`Experience.train_dataloader` (after a resumed run's checkpoint is restored, so the
actors start from the restored weights and collect only the frames left), iterates it as the
training data, saves the replay's state in checkpoints and shuts the actor processes down in
:meth:`Experience.teardown`.

It never reads the learner: ``train()`` hands it what it needs at construction (the feed, with
the n-step settings and the updates the run plans, and the run's :class:`~actorq.util.clock.FrameClock`,
which the learner advances). The learner is handed the experience (``learner.learn_from``); the
callbacks reach it as ``trainer.datamodule``. The one way new weights reach the actors is
:meth:`Experience.push` (the push callback decides when).

Example:
    >>> from functools import partial
    >>> from actorq.actors import actor_pool
    >>> from actorq.util.clock import FrameClock
    >>> from actorq.data.replay import make_replay
    >>> from actorq.experience.replay_feed import ReplayFeed
    >>> experience = Experience(ExperienceSpec("CartPole-v1"),
    ...                         make_actors=partial(actor_pool, num_workers=1, frames_per_batch=100,
    ...                                             total_frames=1000),
    ...                         actor_policy=None, clock=FrameClock(lambda frames: 0.1),
    ...                         feed=ReplayFeed(partial(make_replay, capacity=10_000), n_step=3,
    ...                                         gamma=0.99, planned_updates=900))
    >>> experience.total_frames, experience.actors is None  # nothing starts before fit
    (1000, True)
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from tensordict import TensorDictBase
from torch import nn

from actorq.util.clock import FrameClock
from actorq.envs import make_env
from actorq.envs import make_batched_env
from actorq.util.errors import ConfigError, construct
from actorq.data.learner_ranks import RankSampling, follow_batches, lead_batches
from actorq.actors.base import batch_frames
from actorq.data.replay.base import ReplayBuffer
from actorq.quant import Payload, QuantizedNetwork, payload_nbytes, policy_divergence, quantize
from actorq.algos.batches import Arrivals
from actorq.data.writer import TransitionWriter
from actorq.experience.replay_feed import ReplayFeed
from actorq.experience.feed import Feed

# A resumed run restarts mid-epoch: the actor pool resumes from the learner's frame count
# (``frames_done``, from the run's frame clock), not from a saved iterator position, which Lightning cannot know.
warnings.filterwarnings("ignore", message=r"You're resuming from a checkpoint that ended before the epoch ended")

log = logging.getLogger(__name__)

HELD_OUT_OBSERVATIONS = 256
"""Observations each push measures its copy's fidelity on."""

LOG_PROB_CHECK_STEPS = 64
"""Steps of each rollout whose recorded log-probability is recomputed."""

OUTPUT_CHECK_STEPS = 8
"""Time steps of each actor batch whose recorded network output is recomputed (every env of
the worker at each)."""

LOG_PROB_ERROR_BOUND = 0.05
"""Nats of ``|log mu_recorded - log mu|`` above which a worker is warned of: every importance
ratio of such a step is off by 5% or more, a quarter of PPO's clip range, far beyond float
rounding, which is all that separates the two when the actors ran the version they recorded."""

OUTPUT_ERROR_BOUND = 0.01
"""Share of the recorded outputs' scale (their largest magnitude at the checked steps) above
which a worker's ``abs(recorded - recomputed)`` output is warned of: an action or Q-values off
by a percent, where running the version it is labelled with gives the same bits."""

if TYPE_CHECKING:
    from actorq.actors.pool import ActorPool
    from actorq.quant import QuantSpec
    from actorq.quant.network import BuiltVersion

# The checkpoint entry holding recent observations, for re-quantizing the policy after the run.
CALIBRATION_OBSERVATIONS = "calibration_observations"


@dataclasses.dataclass(frozen=True)
class ExperienceSpec:
    """What every actor (and the evaluation) runs, and the run it belongs to.

    Attributes:
        env_name: the environment.
        seed: the run's seed (actors derive theirs from it; evaluation adds an offset).
        library: the environment suite (``env.library``); ``None`` looks the name up.
        env_modules: modules every actor process imports before it builds its envs
            (``env.module``; this process imported them before the run was built).
        env_options: the suite's options (``env.options``) every env of the run is built with.
        config: the whole run config, kept in checkpoints as a hyperparameter.
    """

    env_name: str
    seed: int = 0
    library: str | None = None
    env_modules: tuple[str, ...] = ()
    env_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    config: dict[str, Any] | None = None


class Experience(L.LightningDataModule):
    """Actors in worker processes feeding the learner, as Lightning's training data.

    Args:
        spec: what the actors run (:class:`ExperienceSpec`).
        make_actors: builds the :class:`~actorq.actors.pool.ActorPool` given ``env_name``,
            ``library``, ``policy``, ``seed`` and the feed's settings (the ``actors`` config
            group, partially applied); it must carry ``total_frames``.
        actor_policy: the policy every actor starts with and the push refreshes (an
            :class:`~actorq.actors.policy.ExplorationPolicy` over a
            :class:`~actorq.quant.QuantizedNetwork`, whose ``quant`` is the actors' precision).
        clock: the run's frame clock (the learner's): the actors start at its frames, with
            its exploration scale, and every push refreshes that scale.
        feed: how the batches reach the learner: a
            :class:`~actorq.experience.replay_feed.ReplayFeed` (off-policy learners) or a
            :class:`~actorq.experience.rollout_feed.RolloutFeed` (on-policy learners).

    With ``trainer.devices > 1`` (:mod:`actorq.data.learner_ranks`) only rank 0 builds the replay,
    the writer and the actors; every rank samples through :attr:`sampling`.

    Attributes:
        replay: the feed's :class:`~actorq.data.replay.base.ReplayBuffer` (after ``setup``;
            ``None`` for rollouts).
        sampling: what the learner samples and feeds priorities to: the replay itself, or
            with several learner ranks a :class:`~actorq.data.learner_ranks.RankSampling` of it
            (``None`` for rollouts).
        writer: the :class:`~actorq.data.writer.TransitionWriter` that stores batches.
        quant: the precision the actors run at: their policy's (``None`` without one).
        actors: the :class:`~actorq.actors.pool.ActorPool` (after ``train_dataloader``).
        total_frames: env frames the run collects.
        frames_per_batch: env frames in each batch the learner receives (a worker's batch,
            or in lock-step collection a round of every worker's).
        policy_version: how many times :meth:`push` pushed new weights (the version the
            actors record with each step, when the learner asks for it).
        actor_batch: observations each actor's policy runs at once (its envs per worker).
    """

    def __init__(self, spec: ExperienceSpec, make_actors: Callable[..., ActorPool], actor_policy: nn.Module | None,
                 clock: FrameClock, feed: Feed):
        super().__init__()
        self.spec = spec
        if spec.config is not None:
            self.save_hyperparameters({"config": spec.config})
        self.make_actors = make_actors
        self.actor_policy = actor_policy
        self.clock = clock
        self.feed = feed
        actors = make_actors.keywords
        self.total_frames = int(actors["total_frames"])
        self.frames_per_batch = batch_frames(actors.get("frames_per_batch", 1), actors.get("num_workers", 1),
                                             actors.get("collection", "async"), actors.get("gather") or 1)
        self.actor_batch = int(actors.get("envs_per_worker", 1))
        feed.check_actors(actors)
        self.policy_version = 0
        self.actors: ActorPool | None = None
        self.log_prob_error: float | None = None
        self.output_error: float | None = None
        self._output_probe: BuiltVersion | None = None  # a pushed version whose recorded output is checked next
        self._resumed_observations: torch.Tensor | None = None
        self._probes: dict[int, QuantizedNetwork] = {}  # precision -> the budget's private copy
        self._warned: set[str] = set()  # the recorded checks that warned already

    @property
    def kind(self) -> str:
        """``"replay"`` or ``"rollout"``: the feed's."""
        return self.feed.kind

    @property
    def replay(self) -> ReplayBuffer | None:
        """The replay an off-policy learner samples (``None`` for rollouts, or before setup)."""
        return self.feed.replay if isinstance(self.feed, ReplayFeed) else None

    @replay.setter
    def replay(self, replay: ReplayBuffer) -> None:
        if not isinstance(self.feed, ReplayFeed):
            raise TypeError("a rollout feed has no replay")
        self.feed.replay = replay

    @property
    def writer(self) -> TransitionWriter | None:
        return self.feed.writer if isinstance(self.feed, ReplayFeed) else None

    @property
    def sampling(self) -> ReplayBuffer | RankSampling | None:
        return self.feed.sampling if isinstance(self.feed, ReplayFeed) else None

    @property
    def quant(self) -> QuantSpec | None:
        return self.actor_policy.network.quant if self.actor_policy is not None else None

    def make_env(self, seed: int | None = None):
        """A fresh environment of this run (for templates, calibration, and evaluation where the
        suite has no lean batch: :meth:`make_eval_env`)."""
        return make_env(self.spec.env_name, seed=self.spec.seed if seed is None else seed, library=self.spec.library,
                        options=self.spec.env_options)

    def make_eval_env(self, episodes: int, seed: int):
        """The environment an evaluation of ``episodes`` episodes plays: a lean batch of
        ``episodes`` envs, stepped together (:func:`actorq.envs.rollout_return`), where the
        suite has one, else one env that plays them in turn."""
        batched = make_batched_env(self.spec.env_name, episodes, seed=seed, library=self.spec.library,
                                   evaluation=True, options=self.spec.env_options)
        return batched if batched is not None else self.make_env(seed)

    def setup(self, stage: str) -> None:
        self.feed.setup(self.trainer.global_rank, self.trainer.world_size, self.make_env)

    def train_dataloader(self):
        """Starts the actor processes, for the frames the run has left (all of them unless
        it resumed from a checkpoint), running the actors' policy at the learner's current
        exploration scale (both from the run's frame clock); a resumed run's actors reseed
        from the frames done. Learner ranks
        other than 0 follow rank 0's batches instead."""
        if self.trainer.world_size == 1:
            return self._start_actors()
        return lead_batches(self._start_actors()) if self.trainer.global_rank == 0 else follow_batches()

    def receive(self, batch: TensorDictBase | Any) -> Arrivals:
        """Hands a batch from the actors to the feed and says what arrived, after checking what
        the actors recorded of the policy they ran (:attr:`log_prob_error`,
        :attr:`output_error`)."""
        if isinstance(batch, TensorDictBase):  # else ActorPool's WRITTEN: a worker stored it
            self.log_prob_error = self._check_recorded_log_prob(batch)
            if self._output_probe is not None:
                self._check_recorded_output(batch)
        return self.feed.receive(batch)

    def actor_counters(self) -> dict[str, int]:
        """Frames the actors dropped and their restarts so far (empty before they start)."""
        if self.actors is None:
            return {}
        return {"dropped_frames": self.actors.dropped_frames, "restarts": self.actors.restarts}

    def calibration_observations(self, count: int) -> torch.Tensor:
        """``count`` observations a push calibrates a static int8 policy on: drawn uniformly
        from the replay without replacement, or the last rollout's (the feed's)."""
        return self.feed.calibration_observations(count)

    def calibration_and_held_out(self, calibration: int, held_out: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What a push calibrates its copy on, and recent observations it does not calibrate
        on, where the copy's fidelity is measured: ``calibration`` and ``held_out``
        observations, none in both (the feed's: the last rollout's and the one before's, or
        one draw from the replay without replacement, split; nothing held out before there is
        any). A resumed run's push before any experience arrived calibrates on the set its
        checkpoint kept."""
        if not self.feed.has_observations() and self._resumed_observations is not None:
            return self._resumed_observations[:calibration], None
        return self.feed.calibration_and_held_out(calibration, held_out)

    @torch.no_grad()
    def _check_recorded_log_prob(self, rollout: TensorDictBase) -> float | None:
        """The largest ``|log mu_recorded - log mu|`` over a sample of the steps the actors ran
        with the version pushed last, ``log mu`` recomputed with the main process's copy of
        that version, each step in the batch the actors ran it in (one worker's envs at one time
        step: a dynamic int8 copy's ranges are its batch's): the actors ran what the learner
        believes they ran when it is float rounding (``None`` when the rollout records no
        log-prob or no step ran that version). Above :data:`LOG_PROB_ERROR_BOUND` it warns,
        once a run, naming the worker."""
        if "log_prob" not in rollout.keys() or self.actor_policy is None:
            return None
        rollout = rollout if rollout.ndim == 2 else rollout.unsqueeze(0)  # [rows, T]
        ran = torch.ones(rollout.shape, dtype=torch.bool)
        if "policy_version" in rollout.keys():
            ran = rollout["policy_version"].reshape(rollout.shape) == self.policy_version
        positions = ran.nonzero()
        if not len(positions):
            return None
        worker = _actor_batch_of_rows(rollout)
        network, errors = self.actor_policy.network, []
        for row, t in positions[torch.randperm(len(positions))[:LOG_PROB_CHECK_STEPS]].tolist():
            rows = (worker == worker[row]).nonzero().squeeze(-1)  # the actors' batch of this step
            step = rollout[rows, t]
            log_prob = network.head.log_prob(network.features(step["observation"]), step["action"])
            index = int((rows == row).nonzero())
            errors.append((float((log_prob[index] - step["log_prob"][index].reshape(())).abs()), row))
        error, row = max(errors)
        if error > LOG_PROB_ERROR_BOUND:
            self._warn_once("log_prob", "actor worker %d recorded log-probabilities up to %.3g nats away from those "
                            "the learner's copy of policy version %d gives for its actions (bound %g): it did not "
                            "run what the learner believes it ran (its CPU's int8 kernels saturating?); "
                            "quant/log_prob_error follows it, this warning is not repeated",
                            _worker_of(rollout, row), error, self.policy_version, LOG_PROB_ERROR_BOUND)
        return error

    @torch.no_grad()
    def _check_recorded_output(self, batch: TensorDictBase) -> None:
        """Sets :attr:`output_error` from the first batch with steps of the pushed version held
        as the probe (replay batches arrive versions after they were collected): the largest
        ``abs(recorded - recomputed)`` of the actors' network output (a deterministic action,
        Q-values) over a sample of its time steps that ran that version, recomputed with the
        probe (the main process's copy of it), all of a worker's envs at a time step
        together, as the actors ran them. A probe older than every step of a batch is dropped.
        Above :data:`OUTPUT_ERROR_BOUND` of the outputs' scale it warns, once a run, naming the
        worker."""
        probe = self._output_probe
        if "output" not in batch.keys():
            return
        steps = batch if batch.ndim == 2 else batch.unsqueeze(0)  # [envs, T]
        versions = steps["policy_version"].reshape(steps.shape)
        ran = versions == probe.policy_version
        if not ran.any():
            if bool((versions > probe.policy_version).all()):  # the actors are past it
                self._output_probe = None
            return
        worker = _actor_batch_of_rows(steps)
        errors, scale = [], 0.0
        for row, t in _one_row_per_worker_step(ran, worker)[:OUTPUT_CHECK_STEPS]:
            rows = (worker == worker[row]).nonzero().squeeze(-1)  # the actors' batch of this step
            step, mine = steps[rows, t], ran[rows, t]
            errors.append((float((probe.output(step["observation"]) - step["output"])[mine].abs().max()), row))
            scale = max(scale, float(step["output"][mine].abs().max()))
        (error, row), self._output_probe = max(errors), None
        self.output_error = error
        if error > OUTPUT_ERROR_BOUND * scale:
            self._warn_once("output", "actor worker %d recorded network outputs up to %.3g away from those the "
                            "learner's copy of policy version %d computes, %.2g of their scale (bound %g): it did "
                            "not run what the learner believes it ran (its CPU's int8 kernels saturating?); "
                            "quant/output_error follows it, this warning is not repeated",
                            _worker_of(steps, row), error, int(probe.policy_version), error / max(scale, 1e-30),
                            OUTPUT_ERROR_BOUND)

    def _warn_once(self, kind: str, message: str, *args) -> None:
        """Logs ``message`` as a warning unless one of ``kind`` was logged already this run."""
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning(message, *args)

    def push(self, network: nn.Module) -> Pushed:
        """Encodes the learner's policy ``network`` (fp32, on the CPU) at the actors' precision,
        calibrated on the calibration set of :meth:`calibration_and_held_out`, and pushes it to
        every actor as the next policy version, at the exploration scale where the run stands.

        The payload is loaded into the actors' policy in place (its buffers are what the push
        copies to the workers); the head's own state (a learned log-std) and the observation
        normalizer's statistics go with it.

        With a divergence budget (``quant.max_kl``, a stochastic policy) the copy's KL is
        measured on the held-out observations first, and a copy over the budget goes out at
        the first fallback precision that meets it (:meth:`_within_budget`).
        """
        observations, held_out = self.calibration_and_held_out(self.quant.calibration_samples,
                                                               HELD_OUT_OBSERVATIONS)
        rung, payload, divergence = self._within_budget(network, observations, held_out)
        actor_network = self.actor_policy.network
        self.policy_version += 1
        actor_network.load_version(payload, network.head.state_dict(), _normalizer_state(network, actor_network),
                                   policy_version=self.policy_version, rung=rung)
        self.output_error = None  # read by this push's log: a later push's measures a later version
        if self._output_probe is None and "output" in self.actor_policy.records:
            self._output_probe = actor_network.built()
        self.actor_policy.policy_version.fill_(self.policy_version)
        self._refresh_noise_scale()
        self.actors.push(self.actor_policy)
        return Pushed(self.policy_version, payload_nbytes(payload), actor_network, observations, held_out,
                      rung, divergence)

    def _within_budget(self, network: nn.Module, observations: torch.Tensor, held_out: torch.Tensor | None
                       ) -> tuple[int, Payload, dict[str, float] | None]:
        """The precision a push goes out at (an index into the actors' network's ``rungs``),
        its payload, and the divergence measured of the actors' own precision
        (:func:`~actorq.quant.fidelity.policy_divergence`'s terms; ``None`` if it was not):
        the actors' precision unless its copy's ``KL(mu || pi)`` on ``held_out`` exceeds
        ``quant.max_kl``, else the first fallback that meets it, or the last. Without fallbacks
        (no budget, a policy without a KL) or held-out observations nothing is measured."""
        rungs = self.actor_policy.network.rungs
        first = None
        for rung, spec in enumerate(rungs):
            payload = quantize(network, spec, observations)
            if rung == len(rungs) - 1 or held_out is None:
                return rung, payload, first
            divergence = self._copy_divergence(network, rung, payload, held_out)
            first = divergence if first is None else first
            if divergence["quant/kl"] <= self.quant.max_kl:
                return rung, payload, first
        raise AssertionError("unreachable: the last precision is always returned")

    def _copy_divergence(self, network: nn.Module, rung: int, payload: Payload, held_out: torch.Tensor
                         ) -> dict[str, float]:
        """``KL(mu || pi)`` (mean and max) of ``network``'s copy at precision ``rung`` on
        ``held_out``, run at the actors' batch, measured on a private copy the actors never read."""
        probe = self._probes.get(rung)
        if probe is None:
            probe = self._probes[rung] = QuantizedNetwork.template_for(network, self.actor_policy.network.rungs[rung])
        probe.load_version(payload, network.head.state_dict(), _normalizer_state(network, probe))
        return policy_divergence(network, probe, held_out, None, self.actor_batch)

    def _refresh_noise_scale(self) -> None:
        self.actor_policy.noise_scale.fill_(self.clock.noise_scale)

    def _start_actors(self) -> ActorPool:
        if self.actors is None:
            self._refresh_noise_scale()
            self.actors = construct(
                self.make_actors,
                env_name=self.spec.env_name,
                library=self.spec.library,
                env_modules=self.spec.env_modules,
                env_options=self.spec.env_options,
                policy=self.actor_policy,
                seed=self.spec.seed + self.clock.frames,
                frames_done=self.clock.frames,
                **self.feed.actor_settings(),
            )
        return self.actors

    def transfer_batch_to_device(self, batch, device, dataloader_idx: int):
        return batch  # experience goes into the CPU replay buffer as it is

    def teardown(self, stage: str) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        """Stops the actor processes (safe to call more than once)."""
        if self.actors is not None:
            self.actors.shutdown()

    def state_dict(self) -> dict:
        """The replay's state (sampling state; with ``replay.checkpoint`` its contents and
        priorities too), the actors' precision, the whole policy version they last
        received (its number, payload, head state such as a learned log-std, and observation
        statistics) and ``quant.calibration_samples`` recent observations
        (:meth:`observations_to_keep`)."""
        state = {"replay": self.feed.state_dict(), "policy_version": self.policy_version}
        if self.quant is not None:
            state["quant"] = dataclasses.asdict(self.quant)
        if self.actor_policy is not None:
            network = self.actor_policy.network
            state["payload"] = {k: v.clone() for k, v in network.payload().items()}
            state["rung"] = int(network.rung)
            state["head"] = _cloned_state(network.head)
            if network.normalizer is not None:
                state["normalizer"] = _cloned_state(network.normalizer)
        observations = self.observations_to_keep()
        if observations is not None:
            state[CALIBRATION_OBSERVATIONS] = observations
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        self.feed.load_state_dict(state_dict.get("replay") or None)
        self.policy_version = state_dict.get("policy_version", 0)
        if self.actor_policy is not None and "payload" in state_dict:
            # The actors restart with the checkpoint's whole version, not the fresh learner's
            # head and statistics (checkpoints written before they were saved hold none).
            rungs = self.actor_policy.network.rungs
            if state_dict.get("rung", 0) >= len(rungs):
                raise ConfigError(
                    f"the checkpoint's actors last ran a fallback precision of quant.max_kl (number "
                    f"{state_dict['rung']}), which this run's quant ({', '.join(r.describe() for r in rungs)}) does "
                    "not have: resume with the checkpoint's quant.max_kl and quant.fallback_bits")
            self.actor_policy.network.load_version(state_dict["payload"], state_dict.get("head"),
                                                   state_dict.get("normalizer"), policy_version=self.policy_version,
                                                   rung=state_dict.get("rung", 0))
        if self.actor_policy is not None:
            self.actor_policy.policy_version.fill_(self.policy_version)
        self._resumed_observations = state_dict.get(CALIBRATION_OBSERVATIONS)

    def observations_to_keep(self) -> torch.Tensor | None:
        """What a checkpoint keeps for calibrating the policy after the run (``python -m
        actorq.export``): ``quant.calibration_samples`` observations drawn as a push draws
        its calibration set, from the states the run's policy visits.

        Torch's generator and the replay's calibration draws are left as they were, so saving
        a checkpoint changes none of the run's later draws. Before any
        experience arrived it is the set a resumed run's checkpoint held; ``None`` without
        either, or without actors' precision.
        """
        if self.quant is None or not self.feed.has_observations():
            return self._resumed_observations
        with torch.random.fork_rng(devices=[]), self.feed.draws_kept():
            observations = self.calibration_observations(self.quant.calibration_samples)
        return observations.detach().clone()


@dataclasses.dataclass(frozen=True)
class Pushed:
    """What :meth:`Experience.push` pushed.

    Attributes:
        version: the policy version the actors now run.
        payload_bytes: bytes of the encoded payload that crossed to each worker.
        actor_network: the actors' network as decoded (the main process's copy).
        observations: the observations the encoding was calibrated on.
        held_out: recent observations it was not calibrated on (``None`` at a rollout-fed
            run's first push), where its fidelity is measured.
        rung: the precision it went out at, an index into ``actor_network.rungs`` (0: the
            actors' own; more: a fallback of the divergence budget).
        budget_divergence: the divergence (``quant/kl``, ``quant/kl_max``) of the copy at the
            actors' own precision on ``held_out``, where the budget measured it (``None``
            where it did not).
    """

    version: int
    payload_bytes: int
    actor_network: nn.Module
    observations: torch.Tensor
    held_out: torch.Tensor | None = None
    rung: int = 0
    budget_divergence: dict[str, float] | None = None

    @property
    def budget_kl(self) -> float | None:
        """The budget's ``KL(mu || pi)`` of the actors' own precision (``None``: not measured)."""
        return None if self.budget_divergence is None else self.budget_divergence["quant/kl"]


def _normalizer_state(network: nn.Module, copy: QuantizedNetwork) -> dict[str, torch.Tensor] | None:
    """The observation statistics of the learner's ``network`` for its ``copy`` (``None``
    when the copy normalizes nothing)."""
    return network.normalizer.state_dict() if copy.normalizer is not None else None


def _cloned_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of ``module``'s state, detached from the tensors the next push rewrites."""
    return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}


def _actor_batch_of_rows(steps: TensorDictBase) -> torch.Tensor:
    """For each row of ``steps`` ``[rows, T]``, a number shared by the rows the actors stepped
    together: the worker that recorded it (all rows one worker's when none is recorded), and in
    a gathered round which of that worker's batches it is."""
    worker = steps["worker"][:, 0] if "worker" in steps.keys() else torch.zeros(steps.shape[0])
    if "segment" in steps.keys():  # a gathered round: a worker's batches apart
        worker = worker * steps.shape[0] + steps["segment"][:, 0]
    return worker


def _worker_of(steps: TensorDictBase, row: int) -> int:
    """The actor worker that recorded ``row`` of ``steps`` ``[rows, T]`` (0 where none is recorded)."""
    return int(steps["worker"][row, 0]) if "worker" in steps.keys() else 0


def _one_row_per_worker_step(ran: torch.Tensor, worker: torch.Tensor) -> list[tuple[int, int]]:
    """``(row, t)`` of one step that ``ran`` for each (worker, time step) that has one, in a
    random order."""
    first = {}
    for row, t in ran.nonzero().tolist():
        first.setdefault((int(worker[row]), t), (row, t))
    picks = list(first.values())
    return [picks[i] for i in torch.randperm(len(picks)).tolist()]
