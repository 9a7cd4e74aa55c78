"""``train(cfg)``: one run from a composed Hydra config: its parts assembled
(:func:`actorq.run.assemble.assemble`), its config and plan saved, the fit, and the summary.

Example:
    >>> import tempfile
    >>> from hydra import compose, initialize_config_module
    >>> tiny = ["actors.total_frames=400", "actors.frames_per_batch=100", "algo.hidden=[16]",
    ...         "algo.learning_starts=200", "eval.every_frames=400", "eval.episodes=1",
    ...         "trainer.enable_progress_bar=false"]
    >>> with initialize_config_module("actorq.conf", version_base="1.3"):
    ...     cfg = compose("config", overrides=["+experiment=dqn_cartpole", *tiny,
    ...                                        "callbacks=no_checkpoint", f"run_dir={tempfile.mkdtemp()}"])
    >>> summary, objects = train(cfg)
    >>> summary["frames"], summary["actor_precision"], sorted(objects["callbacks"])
    (400, 'fp32', ['carbon', 'evaluation', 'push'])
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Iterable
from pathlib import Path

from omegaconf import DictConfig

from actorq.actors.processes import start_fork_server
from actorq.data.learner_ranks import launched_rank
from actorq.experience import Experience
from actorq.run.assemble import RunParts, assemble, write_run_files
from actorq.run.console import lightning_without_adverts
from actorq.util.atomic import write_text_atomically

log = logging.getLogger(__name__)
lightning_without_adverts()
# Lightning's pytree helper trips a deprecation of torch's on every fit; nothing a user can act on.
warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")


def train(cfg: DictConfig) -> tuple[dict, dict]:
    """Trains one run and returns ``(summary, objects)``.

    Args:
        cfg: a config composed from ``actorq.conf`` (see ``conf/config.yaml``).

    Returns:
        The summary written to ``summary.json`` and the live objects for inspection: learner,
        experience, trainer, callbacks (by their name under ``callbacks``), precision_choice.
    """
    run = assemble(cfg)
    start_actors_server(cfg)  # once the run is assembled: a refused run starts no process
    if run.follower:
        return follow(run)
    write_run_files(cfg, run)
    choice = run.precision_choice
    if choice is not None:
        log.info("quant.bits=auto picked %s: %s", run.quant.describe(), choice.metrics())
        if run.resume_from is None:  # a resumed run's curves already start with it
            run.logger.log_metrics(choice.metrics(), step=0)

    interrupted = failed = None
    try:
        with warnings.catch_warnings():
            if run.resume_from is not None:  # it continues in its own run dir, next to its checkpoints
                warnings.filterwarnings("ignore", message="Checkpoint directory .* exists and is not empty")
            run.trainer.fit(run.learner, datamodule=run.experience, ckpt_path=run.resume_from, weights_only=True)
    except SystemExit as stop:  # Lightning's way out after SIGTERM or Ctrl-C, once torn down
        interrupted = Interrupted(143 if run.trainer.received_sigterm else 130)
        interrupted.__cause__ = stop
    except Exception as error:  # the summary says the run failed, and why, before it is raised
        failed = error
    finally:
        run.experience.shutdown()
    wall_clock = run.learner.wall_clock  # a resumed run's time before the resume included

    summary = make_summary(run.learner, run.experience, wall_clock, run.plan.learner_precision.summary(),
                           run.callbacks.values())
    if interrupted is not None:
        summary["status"] = "interrupted"
    if failed is not None:
        summary.update(status="failed", error=f"{type(failed).__name__}: {failed}")
    write_summary(run.run_dir / "summary.json", summary, resumed=run.resume_from is not None)
    if interrupted is not None:
        raise interrupted
    if failed is not None:
        raise failed
    objects = {"learner": run.learner, "experience": run.experience, "trainer": run.trainer,
               "callbacks": run.callbacks, "precision_choice": choice}
    return summary, objects


def start_actors_server(cfg: DictConfig) -> None:
    """Starts the fork server the actor processes will start from (local actors, first learner
    rank), so that its imports overlap the trainer's set-up."""
    if cfg.actors.get("backend", "process") == "process" and launched_rank() == 0:
        start_fork_server()


def follow(run: RunParts) -> tuple[dict, dict]:
    """Learner ranks 1..N-1 of ``trainer.devices=N`` (:mod:`actorq.data.learner_ranks`): the same
    learner, restored from the same checkpoint and taking part in the same checkpoints as rank
    0, with no actors, no replay, no evaluation and no outputs of its own."""
    try:
        run.trainer.fit(run.learner, datamodule=run.experience, ckpt_path=run.resume_from, weights_only=True)
    finally:
        run.experience.shutdown()
    return {"status": "completed", "rank": run.trainer.global_rank, "learners": run.learner.learner_ranks}, \
        {"learner": run.learner, "experience": run.experience, "trainer": run.trainer}


class Interrupted(SystemExit):
    """A run stopped by SIGTERM (exit code 143) or Ctrl-C (130) after it wrote its final
    checkpoint (``ModelCheckpoint(save_on_exception=True)``) and a summary marked
    ``"status": "interrupted"``; a job scheduler sees a failure, not a success."""


def write_summary(path: Path, summary: dict, resumed: bool = False) -> None:
    """Writes ``summary.json`` atomically; a resumed run's summary does not replace one that
    holds more: a resume that fails before it gets further than the run it continues (fewer
    frames, or fewer evaluations) leaves that run's results as they were, and says so."""
    if resumed and path.is_file():
        try:
            before = json.loads(path.read_text())
        except (OSError, ValueError):
            before = {}
        if (before.get("frames") or 0) > summary["frames"] or \
                len(before.get("eval_history") or []) > len(summary["eval_history"]):
            log.warning("%s kept: it holds more (%s frames, %d evaluations) than this run's %s (%s frames, "
                        "%d evaluations)", path, before.get("frames"), len(before.get("eval_history") or []),
                        summary["status"], summary["frames"], len(summary["eval_history"]))
            return
    write_text_atomically(path, json.dumps(summary, indent=2))


def make_summary(learner, experience: Experience, wall_clock: float, learner_precision: dict | None = None,
                 callbacks: Iterable = ()) -> dict:
    """``summary.json``: what the learner and the experience hold, then the fields the learner
    and each callback hand over through their ``summary_fields()`` (PPO's behaviour correction,
    the evaluation's returns, the tracker's energy; a user's own callback may add its own). What a missing callback would have
    said is null, with the reason."""
    summary = {
        "status": "completed",  # actorq.report lists runs without a completed summary apart
        "final_return": None,
        "final_return_reason": "callbacks.evaluation is off: nothing evaluated the policy",
        "best_return": None,
        "final_return_quant": None,
        "actor_precision": experience.quant.describe(),
        # trainer.precision the learner ran at, and why (actorq.run.learner_precision.LearnerPrecision)
        "learner_precision": learner_precision,
        "eval_history": [],
        "eval_history_quant": [],
        "eval_quant_s": 0.0,  # seconds of the quantized policy's evaluations (in wall_clock_s)
        "frames": learner.frames,
        "learner_steps": learner.learner_steps,
        "wall_clock_s": round(wall_clock, 2),
        "frames_per_s": round(learner.frames / wall_clock, 1) if wall_clock else None,
        "learner_updates_per_s": round(learner.learner_steps / learner.time_learn, 1) if learner.time_learn else None,
        "learners": learner.learner_ranks,
        "collect_fraction": round(
            learner.time_collect / max(1e-9, learner.time_collect + learner.time_learn), 3
        ),
        # Where every frame went (this process; a resumed run's earlier part not included):
        # collected by the actor workers = written into the replay + dropped + unused.
        "collect": collect_counts(experience),
        # kWh and kg CO2 of the whole machine during the fit, with how codecarbon measured
        # them; null figures and a reason when nothing was measured (never an estimate).
        "energy": {"kwh": None, "co2_kg": None, "reason": "callbacks.carbon is off (no CarbonTracker)"},
    }
    for source in (learner, *callbacks):
        if hasattr(source, "summary_fields"):
            summary.update(source.summary_fields())
    if summary["final_return"] is not None:
        del summary["final_return_reason"]
    return summary


def collect_counts(experience: Experience) -> dict:
    """Frames the actor workers collected, written into the replay, dropped, and collected
    past the frame budget (unused), and the actor restarts; ``None`` for what a run that
    never started its actors lacks."""
    actors, writer = experience.actors, experience.writer
    return {
        "frames_collected": actors.collected_frames if actors is not None else None,
        "frames_written": writer.write_count if writer is not None else None,
        "dropped_frames": actors.dropped_frames if actors is not None else None,
        "unused_frames": actors.unused_frames if actors is not None else None,
        "actor_restarts": actors.restarts if actors is not None else None,
    }


def describe_result(summary: dict) -> str:
    """The run's one-line result for the console.

    >>> describe_result({"final_return": 187.25, "frames": 5000, "wall_clock_s": 61.4})
    'Final eval return 187.2 after 5000 frames in 61 s'
    >>> describe_result({"final_return": None, "final_return_reason": "callbacks.evaluation is off",
    ...                  "frames": 5000, "wall_clock_s": 61.4})
    'No eval return (callbacks.evaluation is off) after 5000 frames in 61 s'
    >>> describe_result({"final_return": 489.4, "frames": 25088, "wall_clock_s": 42.0, "stop_at_return": 475.0,
    ...                  "stopped_at_frames": 25088})
    'Final eval return 489.4 after 25088 frames in 42 s: it reached eval.stop_at_return=475'
    """
    done = f"after {summary['frames']} frames in {summary['wall_clock_s']:.0f} s"
    if summary["final_return"] is None:
        return f"No eval return ({summary.get('final_return_reason', 'nothing evaluated')}) {done}"
    stopped = f": it reached eval.stop_at_return={summary['stop_at_return']:g}" \
        if summary.get("stopped_at_frames") is not None else ""
    return f"Final eval return {summary['final_return']:.1f} {done}{stopped}"


def describe_outputs(cfg: DictConfig) -> str:
    """Where the run's files are, and the commands that use them next."""
    run_dir = Path(cfg.run_dir)
    commands = [(f"actorq report {run_dir}", "report.md: returns, speed, energy; name more runs to compare")]
    if (run_dir / "checkpoints" / "last.ckpt").exists():
        commands = [(f"actorq evaluate {run_dir} episodes=10 video=true", "score and video"),
                    (f"actorq export {run_dir} policy.pt", "one TorchScript file"),
                    (f"actorq resume {run_dir} actors.total_frames=N", "train on to N frames"), *commands]
    lines = [f"TensorBoard logs: {run_dir / 'tb'}  (tensorboard --logdir {run_dir})",
             f"Summary: {run_dir / 'summary.json'}"]
    lines += [f"{'Next:' if i == 0 else '':<6}{command}    ({what})" for i, (command, what) in enumerate(commands)]
    return "\n".join(lines)
