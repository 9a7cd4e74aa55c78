"""A run's parts, assembled from its config in one place and in two steps: what the run plan
(:mod:`actorq.run.plan`) needs (the checkpoint it continues, the learner, the learner's and
the actors' precisions), the plan, then what is built from the plan (callbacks, logger, the
experience pipeline and the trainer).
``train()`` takes the :class:`RunParts` and reads no node of the config after them; nothing here
writes into the run dir or starts a process (``train()`` then starts the actors' fork server).
``actorq.train``'s example assembles a run.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from actorq.actors.policy import actor_policy
from actorq.callbacks.progress import FrameProgressBar
from actorq.data.learner_ranks import launched_rank, strategy
from actorq.envs import EnvSpec, make_env, random_observations, suite_modules, suite_options
from actorq.experience import Experience, ExperienceSpec, ReplayFeed, RolloutFeed
from actorq.quant import resolve_precision
from actorq.run.build import build, build_learner
from actorq.run.checks import check_run_config
from actorq.run.learner_precision import resolve_learner_precision
from actorq.run.plan import RunPlan, make_plan, saved_precision
from actorq.run.resume import (check_checkpoint, check_new_run_dir, find_checkpoint, load_checkpoint,
                               resumed_precision, started_experiment)
from actorq.util.atomic import write_text_atomically
from actorq.util.values import AUTO

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RunParts:
    """What a run is made of, built and checked, before its actors start.

    Attributes:
        run_dir: where the run writes.
        resume_from: the checkpoint it continues (``None``: a new run).
        learner: the Lightning module that learns.
        plan: the run's resolved choices, its learner precision included.
        callbacks: the run's callbacks by their name under ``callbacks``.
        logger: Lightning's logger (TensorBoard).
        experience: the experience pipeline, connected to the learner.
        trainer: Lightning's Trainer, built with the plan's settings and the callbacks.
        follower: a learner rank after the first of ``trainer.devices=N``: no actors, no
            outputs of its own, only the checkpoint callbacks.
        quant: the actors' precision (``None`` on a follower).
        precision_choice: what ``quant.bits=auto`` measured, if it did.
    """

    run_dir: Path
    resume_from: Path | None
    learner: Any
    plan: RunPlan
    callbacks: dict[str, Any]
    logger: Any
    experience: Experience
    trainer: Any
    follower: bool = False
    quant: Any = None
    precision_choice: Any = None


def assemble(cfg: DictConfig) -> RunParts:
    """The run ``cfg`` configures, assembled in two steps. First what the plan needs: the
    config checked, a continued checkpoint found, the learner built, then the learner's and
    the actors' precision measured (or kept from the run it continues) and the checkpoint
    checked against them; the plan is made from these last. Then the rest is built from the
    plan in one pass: callbacks, logger, experience, trainer. Raises
    :class:`~actorq.util.errors.ConfigError` for a bad config, run dir or checkpoint."""
    check_run_config(cfg)
    run_dir = Path(cfg.run_dir)
    resume_from = find_checkpoint(cfg.get("ckpt_path"), run_dir)
    follower = launched_rank() > 0
    if not follower:  # the other ranks of a multi-process learner share rank 0's run dir
        check_new_run_dir(run_dir, resume_from)
    config = OmegaConf.to_container(cfg, resolve=True)
    L.seed_everything(cfg.seed, workers=True, verbose=False)

    env = make_env(cfg.env.name, seed=cfg.seed, library=cfg.env.get("library"), options=cfg.env.get("options"))
    learner = build_learner(cfg.algo, EnvSpec.from_env(env), cfg.env.name)
    choices = make_plan(cfg, learner)
    learner_precision = plan_learner(cfg, learner, choices, run_dir, resume_from)
    actors = None if follower else plan_actors(cfg, env, learner, choices, resume_from, config)
    plan = choices.measured(learner_precision, None if actors is None else actors.quant)

    callbacks = {name: build(node, **plan.callback(name)) for name, node in cfg.callbacks.items() if node is not None}
    logger = build(cfg.logger)
    experience = connect_experience(cfg, plan, learner, None if actors is None else actors.policy, config)
    if follower:  # only the checkpoint callbacks take part
        trainer_callbacks = [callback for callback in callbacks.values() if isinstance(callback, ModelCheckpoint)]
    else:
        bar = [FrameProgressBar()] if cfg.trainer.get("enable_progress_bar", True) else []  # in env frames
        trainer_callbacks = [*callbacks.values(), *bar]
    return RunParts(run_dir=run_dir, resume_from=resume_from, learner=learner, plan=plan, callbacks=callbacks,
                    logger=logger, experience=experience, follower=follower,
                    quant=None if actors is None else actors.quant,
                    precision_choice=None if actors is None else actors.choice,
                    trainer=build_trainer(cfg, plan, trainer_callbacks, logger))


def plan_learner(cfg: DictConfig, learner, plan: RunPlan, run_dir: Path, resume_from: Path | None):
    """The learner's precision (``trainer.precision``) resolved with the plan's threads set (a
    continued run keeps the precision its plan measured), the learner laid out as measured."""
    if plan.learner_threads is not None:
        torch.set_num_threads(plan.learner_threads)
    precision = resolve_learner_precision(cfg.trainer.precision, learner, cfg.trainer.get("accelerator", "auto"),
                                          saved=saved_precision(run_dir) if resume_from else None)
    precision.lay_out(learner)  # conv trunks: the layout auto measured faster
    return precision


@dataclasses.dataclass(frozen=True)
class ActorsPlan:
    """The actors' precision and the policy they run.

    Attributes:
        quant: the actors' precision (a continued run keeps its own).
        choice: what ``quant.bits=auto`` measured, if it did.
        policy: the behaviour policy the actors run, with the calibration observations of
            its int8 copy.
    """

    quant: Any
    choice: Any
    policy: Any


def plan_actors(cfg: DictConfig, env, learner, plan: RunPlan, resume_from: Path | None, config: dict
                ) -> ActorsPlan:
    """The actors' precision, its budget as ``plan`` has it (a continued run keeps its own;
    ``quant.bits=auto`` measures) and their policy, calibrated on random observations. A
    continued checkpoint is checked against the learner and it."""
    quant = build(cfg.quant, **plan.quant)
    checkpoint = load_checkpoint(resume_from) if resume_from else None
    if checkpoint is not None:
        quant = resumed_precision(checkpoint, quant, budget_planned=cfg.quant.get("max_kl") == AUTO)
    observations = random_observations(env, quant.calibration_samples)
    quant, choice = resolve_precision(learner.behaviour_network, quant, cfg.actors.envs_per_worker,
                                      observations, discrete=learner.spec.discrete)
    if checkpoint is not None:  # Lightning reads it again (weights_only) when it restores the run
        check_checkpoint(checkpoint, resume_from, config, learner, quant)
    return ActorsPlan(quant, choice, actor_policy(learner, quant, observations))


def connect_experience(cfg: DictConfig, plan: RunPlan, learner, actor_policy, config: dict | None = None) -> Experience:
    """The run's experience pipeline, its actors as ``plan`` has them collect, fed in the
    learner family's way and handed what it needs of the learner (its frame clock, n-step
    settings and planned updates), and handed to the learner to learn from."""
    spec = ExperienceSpec(cfg.env.name, seed=cfg.seed, library=cfg.env.get("library"),
                          env_modules=suite_modules(cfg.env.get("module")),
                          env_options=suite_options(cfg.env.get("options")), config=config)
    if learner.experience_kind == "replay":
        feed = ReplayFeed(build(cfg.replay), n_step=getattr(learner, "n_step", 1), gamma=learner.gamma,
                          planned_updates=learner.planned_updates(int(cfg.actors.total_frames)))
    else:
        feed = RolloutFeed()
    experience = Experience(spec, make_actors=build(cfg.actors, **plan.actors), actor_policy=actor_policy,
                            clock=learner.clock, feed=feed)
    learner.learn_from(experience)
    return experience


def build_trainer(cfg: DictConfig, plan: RunPlan, callbacks: list, logger):
    """Lightning's Trainer with the plan's settings; it writes checkpoints only through the
    run's own checkpoint callback, never Lightning's default one."""
    return build(cfg.trainer, **plan.trainer, strategy=strategy(cfg.trainer.devices), callbacks=callbacks,
                 logger=logger, enable_checkpointing=has_checkpoints(callbacks))


def has_checkpoints(callbacks) -> bool:
    """Whether the run writes checkpoints: only through its own checkpoint callback
    (``callbacks=no_checkpoint`` writes none)."""
    return any(isinstance(callback, ModelCheckpoint) for callback in callbacks)


def write_run_files(cfg: DictConfig, run: RunParts) -> None:
    """Writes the run's ``config.yaml`` (:func:`config_yaml`) and ``plan.json`` into its run dir."""
    config = config_yaml(cfg)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    run.plan.save(run.run_dir)
    write_text_atomically(run.run_dir / "config.yaml", config)


def config_yaml(cfg: DictConfig) -> str:
    """The run's ``config.yaml``: its config resolved, headed by the ``+experiment=NAME`` it was
    composed from (the report groups runs by it)."""
    text = OmegaConf.to_yaml(cfg, resolve=True)
    if HydraConfig.initialized():
        experiment = HydraConfig.get().runtime.choices.get("experiment")
    else:  # started from Python (actorq.learn), which saves its overrides as Hydra does
        experiment = started_experiment(Path(cfg.run_dir))
    return text if experiment is None else f"experiment: {experiment}\n{text}"
