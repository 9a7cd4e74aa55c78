"""The regime map's prediction for each task of ``python -m benchmarks.results``: where int8
actors can shorten the task's run on this machine, and where they cannot.

An off-policy run collects asynchronously and goes at about ``min(actor frames/s, learner
updates/s / update_to_data)`` (:func:`actorq.bench.regime.predicted_frames_per_s`); an
on-policy run collects in lock-step (the learner waits for the actors' round and the push of
its new policy, then updates while they wait), so a frame costs the sum of both sides
(:func:`lockstep_frames_per_s`). Both sides are measured for the task as its cells run it:

* **actors**, once with fp32 actors and once with int8 actors, same seed: off-policy, a
  pure-collection run of the task's own experiment (its overrides, the policy acting from the
  first frame, learning starting only at the last batch) and the steady frames/s of its
  ``collect/frames`` curve (:func:`actorq.bench.regime.steady_frames_per_s`); on-policy, a
  short run of the experiment itself and the frames per second the learner waited for them
  (collection, hand-over and push; :func:`lockstep_rate`);
* **learner**: the fp32 cells' own updates/s (the learner's timer, actors running beside it).

The probe is stored as ``regime/TASK.json`` in the out-dir and, like a cell, is not rerun once
written.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
from pathlib import Path

from actorq.util.atomic import write_text_atomically
from actorq.bench.regime import predicted_frames_per_s, steady_frames_per_s
from benchmarks.results_machine import machine

PROBE_FRAMES = 20_480  # 80 batches of 256: the rate settles well inside it for every task
QUICK_PROBE_FRAMES = 2_048
PRECISIONS = {"fp32": 32, "int8": 8}
# Tasks of on-policy learners: they collect in lock-step (lockstep_frames_per_s).
ON_POLICY = {"ppo_cartpole", "ppo_half_cheetah", "ppo_breakout"}


def probe_path(out_dir: Path, task: str) -> Path:
    return Path(out_dir) / "regime" / f"{task}.json"


def probe(task, out_dir: Path, quick: bool) -> dict:
    """Measures the task's actor frames/s at fp32 and int8 (unless stored) and stores them."""
    path = probe_path(out_dir, task.name)
    if path.is_file():
        return json.loads(path.read_text())
    frames = QUICK_PROBE_FRAMES if quick else PROBE_FRAMES
    load_start = os.getloadavg()
    lockstep = task.name in ON_POLICY
    rates, update_to_data = {}, None
    for name, bits in PRECISIONS.items():
        run_dir = path.parent / f"{task.name}-{name}"
        measure = lockstep_rate if lockstep else collection_rate
        rates[name], update_to_data = measure(task, bits, frames, run_dir)
    result = {"task": task.name, "frames": frames, "actor_fps": rates, "update_to_data": update_to_data,
              "lockstep": lockstep, "machine": machine(load_start)}
    write_text_atomically(path, json.dumps(result, indent=2))
    return result


def collection_rate(task, bits: int, frames: int, run_dir: Path) -> tuple[float, float]:
    """Steady frames/s of a pure-collection run of ``task`` with ``bits``-bit actors, and the
    task's updates per frame."""
    cfg, _ = probe_run(task, bits, frames, run_dir, ["actors.init_random_frames=0",
                                                     f"algo.learning_starts={frames - 1}"])
    return steady_frames_per_s(run_dir / "tb"), float(cfg.algo.update_to_data)


def lockstep_rate(task, bits: int, frames: int, run_dir: Path) -> tuple[float, float]:
    """Frames per second of the time a lock-step run of ``task`` with ``bits``-bit actors
    waited for its actors' rounds (collection, hand-over, the push of each new policy), and
    the run's updates per frame. The first round, the actors' start-up, is not counted."""
    cfg, summary = probe_run(task, bits, frames, run_dir, [])
    return waited_frames_per_s(summary, cfg.actors.frames_per_batch), summary["learner_steps"] / summary["frames"]


def waited_frames_per_s(summary: dict, frames_per_batch: int) -> float:
    """From ``summary.json``: the learner's time in updates (steps over updates/s) and the share
    of its time it waited (``collect_fraction``), so the seconds it waited for every round but
    the first.

    Example (10 rounds of 100 frames; 30 s of updates, a quarter of the time waiting: 10 s):
        >>> waited_frames_per_s({"frames": 1000, "learner_steps": 300, "learner_updates_per_s": 10.0,
        ...                      "collect_fraction": 0.25}, frames_per_batch=100)
        90.0
    """
    learn_s = summary["learner_steps"] / summary["learner_updates_per_s"]
    waited_s = learn_s * summary["collect_fraction"] / (1.0 - summary["collect_fraction"])
    return (summary["frames"] - frames_per_batch) / waited_s


def probe_run(task, bits: int, frames: int, run_dir: Path, overrides: list[str]) -> tuple:
    """``train(cfg)`` of the task's experiment for ``frames`` with ``bits``-bit actors, seed 0,
    evaluated once at the end only: its config and summary."""
    from hydra import compose, initialize_config_module

    from actorq.train import train

    if run_dir.exists():  # a probe cut off midway
        shutil.rmtree(run_dir)
    overrides = [*task.ours, f"quant.bits={bits}", "seed=0", f"run_dir={run_dir}", f"actors.total_frames={frames}",
                 *overrides, f"eval.every_frames={frames * 10}", "eval.episodes=1", "callbacks=no_checkpoint",
                 "~callbacks.carbon", "trainer.enable_progress_bar=false"]
    with initialize_config_module("actorq.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    summary, _ = train(cfg)
    return cfg, summary


def lockstep_frames_per_s(actor_fps: float, learner_ups: float, update_to_data: float) -> float:
    """Lock-step: each frame costs its share of the actors' round and of the learner's updates.

    >>> lockstep_frames_per_s(1000.0, 200.0, 0.5)  # 1 ms + 2.5 ms a frame
    285.7142857142857
    """
    return 1.0 / (1.0 / actor_fps + update_to_data / learner_ups)


def prediction(actor_fps: dict[str, float], learner_ups: float, update_to_data: float,
               lockstep: bool = False) -> dict:
    """The regime map's int8/fp32 frames/s for a run, and which side bounds the fp32 run (in
    lock-step: which takes the larger share of its time).

    Example:
        >>> p = prediction({"fp32": 3000.0, "int8": 3300.0}, learner_ups=80.0, update_to_data=1.0)
        >>> p["speedup"], p["bound"], p["learner_fps"]
        (1.0, 'learner', 80.0)
        >>> prediction({"fp32": 300.0, "int8": 450.0}, learner_ups=80.0, update_to_data=0.125)["speedup"]
        1.5
    """
    rate = lockstep_frames_per_s if lockstep else predicted_frames_per_s
    fp32, int8 = (rate(actor_fps[p], learner_ups, update_to_data) for p in ("fp32", "int8"))
    learner_fps = learner_ups / update_to_data
    return {"speedup": int8 / fp32, "bound": "actors" if actor_fps["fp32"] < learner_fps else "learner",
            "learner_fps": learner_fps}


def task_regime(probe_result: dict | None, cells: list[dict]) -> dict | None:
    """Prediction (from the probe and the fp32 cells' updates/s) beside the measurement (int8
    cells' frames/s over fp32 cells', whole cells); None without a probe or fp32 cells."""
    fp32 = [c for c in cells if c["impl"] == "actorq-fp32" and c.get("updates_per_s")]
    if probe_result is None or not fp32:
        return None
    learner_ups = statistics.fmean(c["updates_per_s"] for c in fp32)
    entry = {"actor_fps": probe_result["actor_fps"], "learner_ups": learner_ups,
             "update_to_data": probe_result["update_to_data"],
             "lockstep": probe_result.get("lockstep", False),
             **prediction(probe_result["actor_fps"], learner_ups, probe_result["update_to_data"],
                          probe_result.get("lockstep", False))}
    int8 = [c for c in cells if c["impl"] == "actorq-int8"]
    entry["measured_speedup"] = (statistics.fmean(c["frames"] / c["wall_clock_s"] for c in int8)
                                 / statistics.fmean(c["frames"] / c["wall_clock_s"] for c in fp32)) if int8 else None
    return entry


def describe(entry: dict | None) -> str:
    """One Markdown line: both sides, the prediction and the measurement.

    Example:
        >>> describe({"actor_fps": {"fp32": 3000.0, "int8": 3300.0}, "learner_ups": 80.0,
        ...           "update_to_data": 1.0, "speedup": 1.0, "bound": "learner", "learner_fps": 80.0,
        ...           "measured_speedup": 0.97})  # doctest: +NORMALIZE_WHITESPACE
        'Regime map: actors alone 3000 frames/s fp32, 3300 int8; learner 80 updates/s at 1 update per
        frame = 80 frames/s, so the fp32 run is learner-bound: predicted int8/fp32 frames/s 1.00x,
        measured 0.97x (whole cells, start-up and evaluations included)'
        >>> print(describe({"actor_fps": {"fp32": 1000.0, "int8": 1250.0}, "learner_ups": 200.0,
        ...                 "update_to_data": 0.5, "speedup": 1.0625, "bound": "learner", "learner_fps": 400.0,
        ...                 "measured_speedup": None, "lockstep": True}))  # doctest: +NORMALIZE_WHITESPACE
        Regime map (lock-step): the learner waited for the actors' rounds (collection, hand-over, push) at
        1000 frames/s fp32, 1250 int8; learner 200 updates/s at 0.5 update per frame = 400 frames/s; a
        frame costs the sum of both, 71% of it the learner's in the fp32 run: predicted int8/fp32 frames/s
        1.06x, measured — (no int8 cells yet)
    """
    if entry is None:
        return "Regime map: not probed yet (needs the task's probe and its fp32 cells)"
    actors, measured = entry["actor_fps"], entry["measured_speedup"]
    if entry.get("lockstep"):
        learner_share = (1 / entry["learner_fps"]) / (1 / entry["learner_fps"] + 1 / actors["fp32"])
        sides = (f"Regime map (lock-step): the learner waited for the actors' rounds (collection, hand-over, push) "
                 f"at {actors['fp32']:.0f} frames/s fp32, {actors['int8']:.0f} int8; learner "
                 f"{entry['learner_ups']:.0f} updates/s at {entry['update_to_data']:.3g} update per frame = "
                 f"{entry['learner_fps']:.0f} frames/s; a frame costs the sum of both, {learner_share:.0%} of it "
                 f"the learner's in the fp32 run")
    else:
        sides = (f"Regime map: actors alone {actors['fp32']:.0f} frames/s fp32, {actors['int8']:.0f} int8; learner "
                 f"{entry['learner_ups']:.0f} updates/s at {entry['update_to_data']:g} update per frame = "
                 f"{entry['learner_fps']:.0f} frames/s, so the fp32 run is {entry['bound']}-bound")
    return (f"{sides}: predicted int8/fp32 frames/s {entry['speedup']:.2f}x, measured "
            + ("— (no int8 cells yet)" if measured is None else
               f"{measured:.2f}x (whole cells, start-up and evaluations included)"))
