"""A run's parts, assembled from its config in one place and in one order: the checkpoint it
continues, the learner, the run plan (:mod:`actorq.run.plan`), the learner's precision, the
callbacks and logger, the actors' precision, the experience pipeline and the trainer.
``train()`` takes the :class:`RunParts` and reads no node of the config after them; nothing here
writes into the run dir or starts an actor process (the fork server that will start them
does start, so its imports overlap the assembly). ``actorq.train``'s example assembles a run.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

from actorq.actors.policy import actor_policy
from actorq.actors.processes import start_fork_server
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
                               resumed_precision)

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
    """The run ``cfg`` configures, assembled: its config checked, a continued checkpoint found
    and checked against what is built, the plan made (and its learner precision measured or
    kept from the run it continues). Raises :class:`~actorq.util.errors.ConfigError` for a bad
    config, run dir or checkpoint."""
    check_run_config(cfg)
    if cfg.actors.get("backend", "process") == "process" and launched_rank() == 0:
        start_fork_server()  # its imports overlap building the run, before the actors start
    run_dir = Path(cfg.run_dir)
    resume_from = find_checkpoint(cfg.get("ckpt_path"), run_dir)
    follower = launched_rank() > 0
    if not follower:  # the other ranks of a multi-process learner share rank 0's run dir
        check_new_run_dir(run_dir, resume_from)
    config = OmegaConf.to_container(cfg, resolve=True)
    L.seed_everything(cfg.seed, workers=True, verbose=False)

    env = make_env(cfg.env.name, seed=cfg.seed, library=cfg.env.get("library"), options=cfg.env.get("options"))
    spec = EnvSpec.from_env(env)
    learner = build_learner(cfg.algo, spec, cfg.env.name)
    plan = plan_learner(cfg, learner, run_dir, resume_from)
    callbacks = {name: build(node, **plan.callback(name)) for name, node in cfg.callbacks.items() if node is not None}
    parts = dict(run_dir=run_dir, resume_from=resume_from, learner=learner, plan=plan,
                 callbacks=callbacks, logger=build(cfg.logger))
    if follower:
        checkpoints = [callback for callback in callbacks.values() if isinstance(callback, ModelCheckpoint)]
        return RunParts(**parts, experience=connect_experience(cfg, plan, learner, actor_policy=None),
                        trainer=build_trainer(cfg, plan, checkpoints, parts["logger"]), follower=True)

    quant, choice, observations = plan_actors(cfg, env, learner, resume_from, config)
    experience = connect_experience(cfg, plan, learner, actor_policy(learner, quant, observations), config)
    bar = [FrameProgressBar()] if cfg.trainer.get("enable_progress_bar", True) else []  # in env frames
    trainer = build_trainer(cfg, plan, [*callbacks.values(), *bar], parts["logger"])
    return RunParts(**parts, experience=experience, trainer=trainer, quant=quant, precision_choice=choice)


def plan_learner(cfg: DictConfig, learner, run_dir: Path, resume_from: Path | None) -> RunPlan:
    """The run plan with the learner's threads set and its precision resolved (a continued
    run keeps the precision its plan measured), the learner laid out as measured."""
    plan = make_plan(cfg, learner)
    if plan.learner_threads is not None:
        torch.set_num_threads(plan.learner_threads)
    precision = resolve_learner_precision(cfg.trainer.precision, learner, cfg.trainer.get("accelerator", "auto"),
                                          saved=saved_precision(run_dir) if resume_from else None)
    precision.lay_out(learner)  # conv trunks: the layout auto measured faster
    return dataclasses.replace(plan, learner_precision=precision)


def plan_actors(cfg: DictConfig, env, learner, resume_from: Path | None, config: dict) -> tuple[Any, Any, Any]:
    """``(quant, choice, observations)``: the actors' precision (a continued run keeps its
    own; ``quant.bits=auto`` measures), what auto measured, and the random observations that
    calibrate the int8 copy. A continued checkpoint is checked against the learner and it."""
    quant = build(cfg.quant)
    checkpoint = load_checkpoint(resume_from) if resume_from else None
    if checkpoint is not None:
        quant = resumed_precision(checkpoint, quant)
    observations = random_observations(env, quant.calibration_samples)
    quant, choice = resolve_precision(learner.behaviour_network, quant, cfg.actors.envs_per_worker,
                                      observations, discrete=learner.spec.discrete)
    if checkpoint is not None:  # Lightning reads it again (weights_only) when it restores the run
        check_checkpoint(checkpoint, resume_from, config, learner, quant)
    return quant, choice, observations


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
