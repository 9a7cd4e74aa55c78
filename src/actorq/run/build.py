"""The run's objects from its config, each checked as it is built: the learner against the
env and the policy contract, and (:func:`check_job`) everything ``train()`` builds before its
actors start, with the run's plan (:mod:`actorq.run.plan`), which a sweep checks of every job
before the first one runs."""

from __future__ import annotations

import logging
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.fabric.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig

from actorq.actors.policy import RECORDS
from actorq.algos.base import EXPERIENCE_KINDS, check_policy_network
from actorq.envs import EnvSpec, make_env
from actorq.run.checks import check_run_config
from actorq.run.plan import make_plan
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


def check_job(cfg: DictConfig) -> None:
    """What a sweep checks of each of its jobs before the first one starts
    (:mod:`actorq.sweep`): the run config, and every object ``train`` builds before its actors
    start, built and dropped; nothing is written and no process is started. Raises
    :class:`~actorq.util.errors.ConfigError`."""
    check_run_config(cfg)
    env = make_env(cfg.env.name, seed=cfg.seed, library=cfg.env.get("library"), options=cfg.env.get("options"))
    learner = build_learner(cfg.algo, EnvSpec.from_env(env), cfg.env.name)
    plan = make_plan(cfg, learner)
    for name, node in cfg.callbacks.items():
        if node is not None:
            build(node, **plan.callback(name))
    build(cfg.actors, **plan.actors)
    if cfg.quant is not None:
        build(cfg.quant, **plan.quant)
    if cfg.replay is not None:
        build(cfg.replay)
