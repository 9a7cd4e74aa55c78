"""The run's objects from its config, each checked as it is built: the learner against the
env and the policy contract, the collection mode and push cadence the learner's family needs,
and (:func:`check_job`) everything ``train()`` builds before its actors start, which a sweep
checks of every job before the first one runs."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.fabric.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig

from actorq.actors.policy import RECORDS
from actorq.algos.base import EXPERIENCE_KINDS, check_policy_network
from actorq.envs import EnvSpec, make_env
from actorq.run.checks import check_run_config
from actorq.util.errors import ConfigError

log = logging.getLogger(__name__)


def build(node: DictConfig, **kwargs: Any) -> Any:
    """Instantiates one ``_target_`` node, logging it; bad values become a ``ConfigError``."""
    target = node.get("_target_", "?")
    log.debug("Instantiating <%s>", target)
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as error:
        cause = error.__cause__
        if isinstance(cause, ConfigError):
            raise ConfigError(str(cause)) from cause
        if isinstance(cause, (ValueError, TypeError, MisconfigurationException)):
            raise ConfigError(f"{target.rsplit('.', 1)[-1]}: {cause}") from cause
        raise


def build_learner(node: DictConfig, spec: EnvSpec, env_name: str):
    """The learner, complete: checked against the env's action space and the policy contract."""
    make_learner = build(node)
    algo_cls = make_learner.func
    if algo_cls.action_space != "any" and (algo_cls.action_space == "discrete") != spec.discrete:
        has = "discrete" if spec.discrete else "continuous"
        raise ConfigError(
            f"{algo_cls.__name__} needs {algo_cls.action_space} actions but {env_name} has "
            f"{has} actions; pick an algorithm for {has} actions"
        )
    try:
        learner = make_learner(spec=spec)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{algo_cls.__name__}: {error}") from error
    check_policy_network(learner.behaviour_network, stochastic=learner.stochastic)
    check_declared_needs(learner)
    return learner


def check_declared_needs(learner) -> None:
    """A learner's declared experience kind and records are ones the pipeline provides."""
    name = type(learner).__name__
    if learner.experience_kind not in EXPERIENCE_KINDS:
        raise ConfigError(f"{name}.experience_kind must be one of {list(EXPERIENCE_KINDS)}, "
                          f"got {learner.experience_kind!r}")
    unknown = [record for record in learner.records if record not in RECORDS]
    if unknown:
        raise ConfigError(f"{name}.records asks the actors for {unknown}; they record {list(RECORDS)}")


def resolve_collection(cfg: DictConfig, learner) -> None:
    """``actors.collection=auto``: lock-step rounds for an on-policy learner (its rollouts are
    collected with the policy it just pushed), asynchronous collection for an off-policy
    one and for an on-policy one on frames (there the learner's updates take most of a
    rollout's time, so the actors collect the next rollout meanwhile, a version behind,
    and V-trace corrects for it: docs/measured/pixels.md); an on-policy learner is told
    which it gets (``learner.asynchronous``).
    ``actors.gather=null``: asynchronous rollouts are gathered in rounds of every worker's
    batch (:func:`actorq.actors.base.gather_rounds`), other batches go alone. An on-policy
    run takes one learner rank, and a learner precision named, not timed."""
    if cfg.actors.get("collection", "auto") == "auto":
        overlapped = learner.experience_kind != "rollout" or learner.spec.pixels
        cfg.actors.collection = "async" if overlapped else "lockstep"
    if cfg.actors.get("gather") is None:  # asynchronous rollouts: a round of every worker's, as they arrive
        rounds = learner.experience_kind == "rollout" and cfg.actors.collection == "async"
        cfg.actors.gather = cfg.actors.get("num_workers", 1) if rounds else 1
    if learner.experience_kind != "rollout":
        return
    learner.asynchronous = cfg.actors.collection == "async"
    name = type(learner).__name__
    if cfg.trainer.get("devices", 1) != 1:
        raise ConfigError(f"{name} is an on-policy learner: one learner rank only (trainer.devices=1)")
    if cfg.trainer.get("precision") == "auto" and not hasattr(learner, "update_minibatch"):
        raise ConfigError(f"trainer.precision=auto times one update on a minibatch (update_minibatch), which "
                          f"{name} has not: set trainer.precision=32-true or bf16-mixed")


def learner_threads(cfg: DictConfig, cores: int | None = None, environ: Mapping[str, str] = os.environ) -> int | None:
    """The learner's torch threads: every core this process may use (``cores``) while
    lock-step actors wait for it, the cores its actor worker processes leave (one at least)
    when they collect as it learns; ``None`` (torch's own choice) where ``OMP_NUM_THREADS``
    in ``environ`` says it, or the actors run elsewhere (Ray).

    Example:
        >>> from omegaconf import OmegaConf
        >>> actors = {"backend": "process", "num_workers": 1, "collection": "async"}
        >>> learner_threads(OmegaConf.create({"actors": actors}), cores=4, environ={})
        3
    """
    if environ.get("OMP_NUM_THREADS") or cfg.actors.get("backend", "process") != "process":
        return None
    cores = cores if cores is not None else len(os.sched_getaffinity(0))
    if cfg.actors.get("collection") == "async":
        return max(1, cores - cfg.actors.get("num_workers", 1))
    return cores


def resolve_cadence(cfg: DictConfig, learner) -> None:
    """The learner family's push cadence and random frames where the run leaves them null:
    ``callbacks.push.every_n_steps`` from ``learner.push_every_n_steps`` and
    ``actors.init_random_frames`` from ``learner.init_random_frames``.

    An on-policy run that sets them otherwise is refused (:func:`check_on_policy_cadence`).
    """
    push = cfg.callbacks.get("push")
    if cfg.actors.get("init_random_frames") is None:
        cfg.actors.init_random_frames = learner.init_random_frames
    if push is not None and "every_n_steps" in push and push.every_n_steps is None:
        push.every_n_steps = learner.push_every_n_steps
    if learner.experience_kind == "rollout":
        check_on_policy_cadence(cfg, learner)


def check_on_policy_cadence(cfg: DictConfig, learner) -> None:
    """An on-policy learner's math assumes the actors ran its own policy: random first frames
    (they have no log-probability), no push, a push less often than after every rollout, or
    a warm-up before the first push (a later push has the actors run a policy the learner
    already left behind) are refused."""
    push = cfg.callbacks.get("push")
    name = type(learner).__name__
    if cfg.actors.init_random_frames:
        raise ConfigError(f"{name} learns from the actors' own policy: set actors.init_random_frames=0 "
                          f"(got {cfg.actors.init_random_frames}; random actions have no log-probability)")
    if push is None:
        raise ConfigError(f"{name} learns from the policy its actors run: it needs callbacks.push "
                          "to push it after every rollout")
    for key, value in (("every_n_steps", learner.push_every_n_steps), ("warmup_steps", 0)):
        if push.get(key, value) != value:
            raise ConfigError(f"{name} pushes its policy after every rollout: leave callbacks.push.{key} "
                              f"at {value} (got {push[key]}; the actors would run a policy the learner "
                              "left behind)")


def check_job(cfg: DictConfig) -> None:
    """What a sweep checks of each of its jobs before the first one starts
    (:mod:`actorq.sweep`): the run config, and every object ``train`` builds before its actors
    start, built and dropped; nothing is written and no process is started. Raises
    :class:`~actorq.util.errors.ConfigError`."""
    check_run_config(cfg)
    env = make_env(cfg.env.name, seed=cfg.seed, library=cfg.env.get("library"), options=cfg.env.get("options"))
    learner = build_learner(cfg.algo, EnvSpec.from_env(env), cfg.env.name)
    resolve_collection(cfg, learner)
    resolve_cadence(cfg, learner)
    for node in [*cfg.callbacks.values(), cfg.quant, cfg.actors, cfg.replay]:
        if node is not None:
            build(node)
