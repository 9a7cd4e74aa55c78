"""The run plan: what a run does where its config leaves the choice to the learner's family
or to the machine (``auto`` and ``null``), resolved once, after the learner is built and the
learner's and the actors' precisions are measured, and before the callbacks, the experience
and the trainer are built, which take their settings from it; the config itself is never
written back. ``train()`` saves it as ``plan.json`` beside
``config.yaml``; a resumed run keeps the learner precision its plan measured (measuring again
could pick another in the middle of a run).

Example:
    >>> from omegaconf import OmegaConf
    >>> from actorq.algos.base import Exploration
    >>> from actorq.algos.dqn import DQN
    >>> from actorq.envs import EnvSpec
    >>> cfg = OmegaConf.create({"actors": {"collection": "auto", "gather": None, "init_random_frames": None,
    ...                                    "num_workers": 2, "backend": "process"},
    ...                         "callbacks": {"push": {"every_n_steps": None}},
    ...                         "trainer": {"devices": 1, "precision": "32-true"}})
    >>> plan = make_plan(cfg, DQN(EnvSpec(obs_dim=4, discrete=True, num_actions=2), Exploration(0.1), hidden=(8,)),
    ...                  cores=4, environ={})
    >>> plan.collection, plan.gather, plan.init_random_frames, plan.push_every_n_steps, plan.learner_threads
    ('async', 1, 1000, 100, 2)
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from actorq.run.learner_precision import LearnerPrecision
from actorq.util.atomic import write_text_atomically
from actorq.util.errors import ConfigError
from actorq.util.values import AUTO

PLAN_FILE = "plan.json"


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """The run's resolved choices.

    Attributes:
        collection: ``"async"`` or ``"lockstep"`` (``actors.collection``).
        gather: workers' batches the learner takes as one (``actors.gather``).
        init_random_frames: the first frames with random actions (``actors.init_random_frames``).
        push_every_n_steps: learner steps between pushes (``callbacks.push.every_n_steps``);
            ``None`` where the run has no push callback with that setting.
        learner_threads: the learner's torch threads; ``None``: torch's own choice.
        max_kl: the divergence budget of the actors' copy (``quant.max_kl``); ``None``: none.
        learner_precision: ``trainer.precision`` resolved, and why; ``None`` until it is (a
            sweep's check of its jobs plans without timing anything).
        actor_precision: the actors' precision as measured or kept (``quant.bits=auto``'s
            pick, e.g. ``"int8 static per_channel fp32-ends plain"``); ``None`` until it is, or with no actors (a
            learner rank after the first).
    """

    collection: str
    gather: int
    init_random_frames: int
    push_every_n_steps: int | None
    learner_threads: int | None
    max_kl: float | None = None
    learner_precision: LearnerPrecision | None = None
    actor_precision: str | None = None

    def measured(self, learner_precision: LearnerPrecision, actors_quant: Any = None) -> RunPlan:
        """The plan made: these choices with the precisions measured (or kept) for them and,
        with actors (``actors_quant``, their :class:`~actorq.quant.QuantSpec`), the budget
        they run (a resumed run keeps its checkpoint's)."""
        if actors_quant is None:
            return dataclasses.replace(self, learner_precision=learner_precision)
        return dataclasses.replace(self, learner_precision=learner_precision,
                                   actor_precision=actors_quant.describe(), max_kl=actors_quant.max_kl)

    @property
    def actors(self) -> dict[str, Any]:
        """What the plan sets of the actors' node (``actors.*``)."""
        return {"collection": self.collection, "gather": self.gather, "init_random_frames": self.init_random_frames}

    @property
    def quant(self) -> dict[str, Any]:
        """What the plan sets of the actors' precision (``quant.*``)."""
        return {"max_kl": self.max_kl}

    def callback(self, name: str) -> dict[str, Any]:
        """What the plan sets of the callback ``callbacks.NAME``."""
        if name == "push" and self.push_every_n_steps is not None:
            return {"every_n_steps": self.push_every_n_steps}
        return {}

    @property
    def trainer(self) -> dict[str, Any]:
        """What the plan sets of the trainer's node (``trainer.*``)."""
        return {} if self.learner_precision is None else {"precision": self.learner_precision.precision}

    def save(self, run_dir: Path) -> None:
        write_text_atomically(Path(run_dir) / PLAN_FILE, json.dumps(dataclasses.asdict(self), indent=2))


def saved_precision(run_dir: Path) -> dict | None:
    """The learner precision the run in ``run_dir`` planned (``plan.json``), as saved; ``None``
    for a run dir without a readable plan (one from before plans were saved)."""
    try:
        saved = json.loads((Path(run_dir) / PLAN_FILE).read_text())
    except (OSError, ValueError):
        return None
    return saved.get("learner_precision") if isinstance(saved, dict) else None


def make_plan(cfg: DictConfig, learner, cores: int | None = None,
              environ: Mapping[str, str] = os.environ) -> RunPlan:
    """The plan of a run of ``learner`` configured by ``cfg``, its learner precision left to
    :func:`actorq.run.learner_precision.resolve_learner_precision` (it times updates). Tells
    an on-policy learner how its actors collect (``learner.asynchronous``). Raises a
    :class:`~actorq.util.errors.ConfigError` for what the learner's family cannot do."""
    collection, gather = plan_collection(cfg, learner)
    init_random_frames, push_every = plan_cadence(cfg, learner)
    threads = learner_threads(cfg.actors, collection, cores, environ)
    return RunPlan(collection, gather, init_random_frames, push_every, threads, plan_budget(cfg, learner))


ON_POLICY_MAX_KL = 0.01
"""``quant.max_kl=auto``'s budget for an on-policy learner."""


def plan_budget(cfg: DictConfig, learner) -> float | None:
    """``quant.max_kl``, with ``auto`` resolved: :data:`ON_POLICY_MAX_KL` for an on-policy
    learner, whose updates weight the actors' actions by the probability the policy that ran
    them gave them, and none for an off-policy one, which learns from any behaviour (a trained
    SAC actor's int8 copy measured over 0.01 on most pushes, docs/fidelity.md: a budget there
    would put its actors on fp32 for nothing)."""
    quant = cfg.get("quant")
    budget = AUTO if quant is None else quant.get("max_kl", AUTO)
    if budget != AUTO:
        return budget
    return ON_POLICY_MAX_KL if learner.experience_kind == "rollout" else None


def plan_collection(cfg: DictConfig, learner) -> tuple[str, int]:
    """``(collection, gather)``. ``actors.collection=auto``: lock-step rounds for an on-policy
    learner (its rollouts are collected with the policy it just pushed), asynchronous
    collection for an off-policy one and for an on-policy one on frames (there the learner's
    updates take most of a rollout's time, so the actors collect the next rollout meanwhile, a
    version behind, and V-trace corrects for it: docs/measured/pixels.md).
    ``actors.gather=null``: asynchronous rollouts are gathered in rounds of every worker's
    batch (:func:`actorq.actors.base.gather_rounds`), other batches go alone. An on-policy
    run takes one learner rank, and a learner precision named, not timed."""
    collection = cfg.actors.get("collection", "auto")
    rollouts = learner.experience_kind == "rollout"
    if collection == "auto":
        collection = "async" if not rollouts or learner.spec.pixels else "lockstep"
    gather = cfg.actors.get("gather")
    if gather is None:
        gather = cfg.actors.get("num_workers", 1) if rollouts and collection == "async" else 1
    if rollouts:
        learner.asynchronous = collection == "async"
        check_on_policy_trainer(cfg, learner)
    return collection, gather


def check_on_policy_trainer(cfg: DictConfig, learner) -> None:
    name = type(learner).__name__
    if cfg.trainer.get("devices", 1) != 1:
        raise ConfigError(f"{name} is an on-policy learner: one learner rank only (trainer.devices=1)")
    if cfg.trainer.get("precision") == "auto" and not hasattr(learner, "update_minibatch"):
        raise ConfigError(f"trainer.precision=auto times one update on a minibatch (update_minibatch), which "
                          f"{name} has not: set trainer.precision=32-true or bf16-mixed")


def plan_cadence(cfg: DictConfig, learner) -> tuple[int, int | None]:
    """``(init_random_frames, push_every_n_steps)``: the learner family's where the run leaves
    them null (``learner.init_random_frames``, ``learner.push_every_n_steps``). An on-policy
    run that sets them otherwise is refused (:func:`check_on_policy_cadence`)."""
    random_frames = cfg.actors.get("init_random_frames")
    random_frames = learner.init_random_frames if random_frames is None else random_frames
    push = cfg.callbacks.get("push")
    push_every = None
    if push is not None and "every_n_steps" in push:
        push_every = learner.push_every_n_steps if push.every_n_steps is None else push.every_n_steps
    if learner.experience_kind == "rollout":
        check_on_policy_cadence(learner, random_frames, push, push_every)
    return random_frames, push_every


def check_on_policy_cadence(learner, random_frames: int, push: DictConfig | None, push_every: int | None) -> None:
    """An on-policy learner's math assumes the actors ran its own policy: random first frames
    (they have no log-probability), no push, a push less often than after every rollout, or
    a warm-up before the first push (a later push has the actors run a policy the learner
    already left behind) are refused."""
    name = type(learner).__name__
    if random_frames:
        raise ConfigError(f"{name} learns from the actors' own policy: set actors.init_random_frames=0 "
                          f"(got {random_frames}; random actions have no log-probability)")
    if push is None:
        raise ConfigError(f"{name} learns from the policy its actors run: it needs callbacks.push "
                          "to push it after every rollout")
    chosen = {"every_n_steps": push_every, "warmup_steps": push.get("warmup_steps", 0)}
    for key, value in (("every_n_steps", learner.push_every_n_steps), ("warmup_steps", 0)):
        if chosen[key] not in (None, value):
            raise ConfigError(f"{name} pushes its policy after every rollout: leave callbacks.push.{key} "
                              f"at {value} (got {chosen[key]}; the actors would run a policy the learner "
                              "left behind)")


def learner_threads(actors: Mapping, collection: str, cores: int | None = None,
                    environ: Mapping[str, str] = os.environ) -> int | None:
    """The learner's torch threads: every core this process may use (``cores``) while
    lock-step actors wait for it, the cores its actor worker processes leave (one at least)
    when they collect as it learns; ``None`` (torch's own choice) where ``OMP_NUM_THREADS``
    in ``environ`` says it, or the actors run elsewhere (Ray).

    Example:
        >>> learner_threads({"backend": "process", "num_workers": 1}, "async", cores=4, environ={})
        3
    """
    if environ.get("OMP_NUM_THREADS") or actors.get("backend", "process") != "process":
        return None
    cores = cores if cores is not None else len(os.sched_getaffinity(0))
    if collection == "async":
        return max(1, cores - actors.get("num_workers", 1))
    return cores
