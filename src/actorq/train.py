"""``train(cfg)``: the whole recipe, top to bottom, from a composed Hydra config.

Example:
    >>> from hydra import compose, initialize_config_module
    >>> with initialize_config_module("actorq.conf", version_base="1.3"):  # doctest: +SKIP
    ...     cfg = compose("config", overrides=["+experiment=dqn_cartpole", "run_dir=/tmp/run"])
    >>> summary, objects = train(cfg)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import lightning as L
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from actorq.callbacks.evaluation import Evaluation
from actorq.envs import EnvSpec, make_env, random_observations
from actorq.errors import ConfigError
from actorq.replay.experience import ExperienceWriter
from actorq.replay.factory import transition_template

log = logging.getLogger(__name__)


def build(node: DictConfig, **kwargs: Any) -> Any:
    """Instantiates one ``_target_`` node, logging it; bad values become a ``ConfigError``."""
    target = node.get("_target_", "?")
    log.info("Instantiating <%s>", target)
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as error:
        cause = error.__cause__
        if isinstance(cause, ConfigError):
            raise ConfigError(str(cause)) from cause
        if isinstance(cause, (ValueError, TypeError)):
            raise ConfigError(f"{target.rsplit('.', 1)[-1]}: {cause}") from cause
        raise


def check_action_space(algo_cls: type, spec: EnvSpec, env_name: str) -> None:
    """Fails early when a discrete algorithm meets continuous actions or the reverse."""
    wants_discrete = algo_cls.action_space == "discrete"
    if wants_discrete != spec.discrete:
        has = "discrete" if spec.discrete else "continuous"
        raise ConfigError(
            f"{algo_cls.__name__} needs {algo_cls.action_space} actions but {env_name} has "
            f"{has} actions; pick an algorithm for {has} actions"
        )


def train(cfg: DictConfig) -> tuple[dict, dict]:
    """Trains one run and returns ``(summary, objects)``.

    Args:
        cfg: a config composed from ``actorq.conf`` (see ``conf/config.yaml``).

    Returns:
        The summary written to ``summary.json`` and the live objects (learner, trainer,
        callbacks) for inspection.
    """
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    L.seed_everything(cfg.seed, workers=True, verbose=False)

    env = make_env(cfg.env.name, seed=cfg.seed)
    spec = EnvSpec.from_env(env)
    make_learner = build(cfg.algo)
    check_action_space(make_learner.func, spec, cfg.env.name)
    try:
        learner = make_learner(spec=spec)
    except ValueError as error:
        raise ConfigError(f"{make_learner.func.__name__}: {error}") from error
    learner.run_config = OmegaConf.to_container(cfg, resolve=True)
    replay = build(cfg.replay, template=transition_template(env),
                   planned_updates=learner.planned_updates(cfg.actors.total_frames))
    writer = ExperienceWriter(replay, learner.n_step, learner.gamma)  # actors' own, if shared
    broadcast = build(cfg.quant)
    observations = random_observations(env, broadcast.quant.calibration_samples)
    actor_policy = broadcast.prepare(learner, cfg.actors.envs_per_worker, observations)
    actors = build(cfg.actors, env_name=cfg.env.name, policy=actor_policy, seed=cfg.seed,
                   writer=writer if writer.in_workers else None)
    learner.attach(actors, replay, writer)

    evaluation = Evaluation(
        cfg.env.name, cfg.eval.every_frames, cfg.eval.episodes, seed=cfg.seed + 10_000, broadcast=broadcast
    )
    callbacks = [broadcast, evaluation, *(build(node) for node in cfg.callbacks.values())]
    trainer = build(cfg.trainer, callbacks=callbacks, logger=build(cfg.logger))

    started = time.perf_counter()
    try:
        trainer.fit(learner)
    finally:
        actors.shutdown()
    wall_clock = time.perf_counter() - started

    summary = make_summary(learner, evaluation, broadcast, wall_clock)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    objects = {"learner": learner, "trainer": trainer, "evaluation": evaluation, "broadcast": broadcast}
    return summary, objects


def make_summary(learner, evaluation: Evaluation, broadcast, wall_clock: float) -> dict:
    return {
        "final_return": evaluation.last,
        "best_return": evaluation.best,
        "final_return_quant": evaluation.last_quant,
        "actor_precision": broadcast.quant.describe(),
        "eval_history": evaluation.history,
        "eval_history_quant": evaluation.history_quant,
        "frames": learner.frames,
        "learner_steps": learner.learner_steps,
        "wall_clock_s": round(wall_clock, 2),
        "frames_per_s": round(learner.frames / wall_clock, 1) if wall_clock else None,
        "collect_fraction": round(
            learner.time_collect / max(1e-9, learner.time_collect + learner.time_learn), 3
        ),
    }


def describe_outputs(cfg: DictConfig) -> str:
    run_dir = Path(cfg.run_dir)
    return (
        f"TensorBoard logs: {run_dir / 'tb'}  (tensorboard --logdir {run_dir})\n"
        f"Summary: {run_dir / 'summary.json'}"
    )

