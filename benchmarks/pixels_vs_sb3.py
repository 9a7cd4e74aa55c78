"""``python -m benchmarks.pixels_vs_sb3``: Stable-Baselines3's PPO ``CnnPolicy`` and ours on one
Atari game, the same settings and frames, one after the other; each side's steady frames/s
beside the learner alone, the actors alone and the machine's limit computed from them.

Both sides train ``ppo_GAME``'s settings (CleanRL's ppo_atari: 8 envs x 128 steps a rollout,
4 epochs of 4 minibatches of 256, the Nature-CNN); SB3 is built as ``python -m
benchmarks.results`` builds its ``ppo_breakout`` peer (``make_atari_env`` and
``VecFrameStack(4)``, its default threads) in a fresh process, and ours is the real command
(``python -m actorq +experiment=ppo_GAME ...``) in a fresh run dir. Neither side evaluates,
checkpoints or tracks energy: the rows time training alone.

Rows: ``sb3``; ``fp32`` (``quant.bits=32 actors.collection=lockstep``); ``int8``
(``quant.bits=8 actors.collection=lockstep``); ``int8-async`` (``quant.bits=8
actors.collection=async``); and one per ``--ours "OVERRIDES"`` (``--ours quant.bits=8``: the
experiment's own collection, whichever ``actors.collection=auto`` picks). A row's
``steady_fps`` counts the frames from the end of its first rollout's update to the end of its
last over the seconds between them (start-up, the first collection and the first update left
out); ``learn_share`` is the part of those seconds spent in the update (SB3's ``train()``, our
learner's ``time/learn_s``); ``startup_s`` runs from the side's launch to the end of its first
update. An int8 row's ``pushes_fallen_back`` (JSON) is the share of its pushes that went out in
fp32 instead (``quant.max_kl``'s budget).

Then, unless ``--no-alone``, each side alone on one core: the learner (``actorq bench
pixel_learner --check-learner --threads 1``: actorq's PPO learner at the precision and layout
our runs picked) costs ``L`` seconds a frame, an actor worker (``actorq bench fleet``: env,
policy and sampling, pinned) ``A``, fp32 and int8. The limits table gives, per actor
precision: ``serial_fps = 1 / (L + A)`` (one core, each side in turn), ``overlap_fps =
min(1/L, 1/A)`` (one core each, both sides busy at once: ``actors.collection=async``) and
``packed_fps = cores / (L + A)`` (every core busy with one side or the other, no overhead: no
run on this machine goes faster). A row's ``of_limit`` is its steady frames/s over the
``packed_fps`` of its actors' precision.

Before each row and each alone bench, the CPU use of the machine is sampled (``busy_before``,
in cores); while it is above ``--max-busy`` the bench waits, up to ``--wait-s``, then warns
(``--strict``: refuses, exit code 2). The 1-minute load average before and after each row is
printed beside it (it still holds the row before: a busy machine shows in ``busy_before``).

Usage::

    python -m benchmarks.pixels_vs_sb3 [--game breakout] [--frames 20480] [--rows sb3 fp32 int8 int8-async]
        [--ours "quant.bits=8 actors.collection=async" ...] [--seed 0] [--max-busy 0.3] [--wait-s 120]
        [--strict] [--no-alone] [--runs-dir bench-results/pixels_vs_sb3] [--out FILE.json] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import psutil

from actorq.bench._table import format_table, write_json
from actorq.bench.fleet import CPU_FLAGS
from benchmarks.results_machine import machine

ROLLOUT = 1024
"""Frames a rollout: ``ppo_GAME``'s ``actors.frames_per_batch``, SB3's ``n_envs * n_steps``."""
GAMES = {"breakout": "BreakoutNoFrameskip-v4", "pong": "PongNoFrameskip-v4"}
"""Our game (``+experiment=ppo_GAME``) and SB3's env id for it."""
TRUNK = "nature"  # ppo_GAME's algo.pixel_trunk, timed alone
# Each row names its collection: what actors.collection=auto picks for PPO on frames may change.
OURS = {"fp32": ("quant.bits=32", "actors.collection=lockstep"), "int8": ("quant.bits=8", "actors.collection=lockstep"),
        "int8-async": ("quant.bits=8", "actors.collection=async")}
ROWS = ("sb3", *OURS)
TRAINING_ONLY = ("callbacks=no_checkpoint", "~callbacks.carbon", "~callbacks.evaluation",
                 "trainer.enable_progress_bar=false")
BUSY_SAMPLE_S = 3.0
INSTALL_PEER = "pip install 'actorq[bench]'"


# --- what a run's curve says ----------------------------------------------------------------


def steady(points: Sequence[tuple[float, float, float]]) -> dict:
    """Frames/s from the first point to the last, and the share of that time in the update.

    Args:
        points: ``(wall time s, frames, update seconds so far)`` at the end of each rollout's
            update, in order.

    Example:
        >>> steady([(10.0, 1024, 2.0), (14.0, 2048, 4.5), (18.0, 3072, 7.0)])
        {'steady_fps': 256.0, 'learn_share': 0.625, 'steady_frames': 2048}
    """
    (first_s, first_frames, first_learn), (last_s, last_frames, last_learn) = points[0], points[-1]
    if last_s <= first_s:
        raise RuntimeError(f"{len(points)} rollout(s) timed: a steady rate needs two or more")
    seconds = last_s - first_s
    return {"steady_fps": (last_frames - first_frames) / seconds, "learn_share": (last_learn - first_learn) / seconds,
            "steady_frames": int(last_frames - first_frames)}


def tensorboard_points(tb: Path) -> list[tuple[float, float, float]]:
    """Our run's ``(wall time, collect/frames, time/learn_s)``, one per update (logged at the
    end of each)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tb), size_guidance={"scalars": 0})
    events.Reload()
    learn = {point.step: point.value for point in events.Scalars("time/learn_s")}
    return [(point.wall_time, point.value, learn[point.step]) for point in events.Scalars("collect/frames")]


# --- the two sides ----------------------------------------------------------------------------


def run_sb3(game: str, frames: int, seed: int) -> dict:
    """SB3's PPO on ``game`` for ``frames`` frames, in this process (a fresh one: see
    :func:`sb3_row`); the points of :func:`steady` taken as each rollout's collection starts
    (after the last update) and when learning ends."""
    import torch
    from stable_baselines3.common.callbacks import BaseCallback

    from benchmarks.results import SUITE
    from benchmarks.results_peer import make_on_policy_model, time_train

    task = dataclasses.replace(SUITE["ppo_breakout"], env_id=GAMES[game], atari_game=game)
    model = make_on_policy_model(task, seed, dict(task.peer_kwargs))
    learning = time_train(model)
    points = []

    class UpdateEnds(BaseCallback):
        def _on_rollout_start(self) -> None:
            if self.num_timesteps:
                points.append((time.time(), self.num_timesteps, learning["seconds"]))

        def _on_step(self) -> bool:
            return True

        def _on_training_end(self) -> None:
            points.append((time.time(), self.num_timesteps, learning["seconds"]))

    model.learn(total_timesteps=frames, callback=UpdateEnds())
    return {"frames": int(model.num_timesteps), "points": points, "threads": torch.get_num_threads()}


def sb3_row(game: str, frames: int, seed: int) -> dict:
    """The ``sb3`` row: :func:`run_sb3` in a fresh Python process, timed from its launch."""
    launched = time.time()
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        result = pool.submit(run_sb3, game, frames, seed).result()
    wall = time.time() - launched
    return {"overrides": "-", "actors": "fp32 (SB3)", "learner": f"fp32, {result['threads']} threads",
            "frames": result["frames"], **steady(result["points"]),
            "startup_s": result["points"][0][0] - launched, "wall_s": wall}


def ours_row(game: str, overrides: Sequence[str], frames: int, seed: int, run_dir: Path) -> dict:
    """One of our rows: ``python -m actorq +experiment=ppo_GAME OVERRIDES`` in a fresh
    ``run_dir`` (its console in ``run_dir.log``), read back from its summary and TensorBoard
    events."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "actorq", f"+experiment=ppo_{game}", *overrides, f"actors.total_frames={frames}",
               f"seed={seed}", f"run_dir={run_dir}", f"hydra.run.dir={run_dir}", *TRAINING_ONLY]
    console = run_dir.with_suffix(".log")
    launched = time.time()
    with console.open("w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)
    wall = time.time() - launched
    if done.returncode:
        tail = "".join(console.read_text().splitlines(keepends=True)[-15:])
        raise RuntimeError(f"{shlex.join(command)} exited with {done.returncode}:\n{tail}")
    summary = json.loads((run_dir / "summary.json").read_text())
    points = tensorboard_points(run_dir / "tb")
    learner = summary["learner_precision"] or {}
    layout = " channels-last" if learner.get("channels_last") else ""
    fallback = ((summary.get("fidelity") or {}).get("fallback") or {}).get("mean")
    return {"overrides": " ".join(overrides), "actors": summary["actor_precision"],
            "learner": f"{learner.get('precision', '?')}{layout}", "frames": summary["frames"], **steady(points),
            "startup_s": points[0][0] - launched, "wall_s": wall, "run_dir": str(run_dir),
            "pushes_fallen_back": fallback}


# --- each side alone, and the limit -------------------------------------------------------------


def bench_json(name: str, options: Sequence[str], out: Path) -> list[dict]:
    """``actorq bench NAME OPTIONS`` in a fresh process (it may pin itself to a core); its rows."""
    command = [sys.executable, "-m", "actorq.bench", name, *options, "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{shlex.join(command)} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    return json.loads(out.read_text())["rows"]


def learner_alone_s(precision: str, channels_last: bool, quick: bool, work: Path) -> float:
    """Seconds a frame of actorq's PPO learner (``ppo_GAME``'s trunk and rollout) on one thread."""
    options = ["--trunks", TRUNK, "--devices", "cpu", "--precisions", precision, "--layouts",
               "channels-last" if channels_last else "default", "--check-learner", "--threads", "1",
               *(["--quick"] if quick else ["--rollouts", "3"])]
    return learner_cost(bench_json("pixel_learner", options, work / "pixel_learner.json"))


def learner_cost(rows: Sequence[dict]) -> float:
    """Seconds a frame of actorq's PPO learner, from ``actorq bench pixel_learner
    --check-learner``'s rows.

    Example:
        >>> learner_cost([{"what": "update loop", "learner_fps": 400.0},
        ...               {"what": "actorq PPO learner", "learner_fps": 250.0}])
        0.004
    """
    return 1 / next(row["learner_fps"] for row in rows if row["what"] == "actorq PPO learner")


def actors_alone_s(game: str, quick: bool, work: Path) -> dict[str, float]:
    """Core-seconds a frame of one pinned actor worker, ``{"fp32": ..., "int8": ...}``: fp32 in
    its faster layout (as fp32 actors pick it), int8 the copy ``quant.bits=8`` runs."""
    options = ["--game", game, "--trunks", TRUNK, "--learner-fps", *(["--quick"] if quick else [])]
    return actor_costs(bench_json("fleet", options, work / "fleet.json"))


def actor_costs(rows: Sequence[dict]) -> dict[str, float]:
    """Core-seconds a frame of the ``TRUNK`` actor, fp32 and int8, from ``actorq bench fleet``'s
    rows: fp32's faster layout, and the int8 copy a run's ``quant.bits=8`` gets.

    Example:
        >>> rows = [{"trunk": "-", "precision": "env alone (ale)", "core_s_per_frame": 1e-4, "run_with": "-"},
        ...         {"trunk": "nature", "precision": "fp32", "core_s_per_frame": 3e-3, "run_with": "-"},
        ...         {"trunk": "nature", "precision": "fp32 channels-last", "core_s_per_frame": 2e-3, "run_with": "-"},
        ...         {"trunk": "nature", "precision": "int8 static (onednn)", "core_s_per_frame": 5e-4,
        ...          "run_with": "quant.bits=8 quant.engine=onednn"},
        ...         {"trunk": "nature", "precision": "int8 static (x86)", "core_s_per_frame": 1e-3,
        ...          "run_with": "quant.bits=8"}]
        >>> actor_costs(rows)
        {'fp32': 0.002, 'int8': 0.001}
    """
    rows = [row for row in rows if row.get("trunk") == TRUNK]
    return {"fp32": min(row["core_s_per_frame"] for row in rows if row["precision"].startswith("fp32")),
            "int8": next(row["core_s_per_frame"] for row in rows if row["run_with"] == "quant.bits=8")}


def limits(learner_s: float, actor_s: float, cores: int) -> dict:
    """What this machine allows a run whose learner costs ``learner_s`` and actors ``actor_s``
    core-seconds a frame (frames/s): each side alone, one core taking turns, one core each
    side overlapped (with two cores or more), and every core busy.

    Example:
        >>> limits(0.004, 0.001, 2)
        {'learner_fps': 250.0, 'actor_fps': 1000.0, 'serial_fps': 200.0, 'overlap_fps': 250.0, 'packed_fps': 400.0}
    """
    both = learner_s + actor_s
    return {"learner_fps": round(1 / learner_s, 1), "actor_fps": round(1 / actor_s, 1),
            "serial_fps": round(1 / both, 1),
            "overlap_fps": round(min(1 / learner_s, 1 / actor_s), 1) if cores >= 2 else None,
            "packed_fps": round(cores / both, 1)}


def limit_rows(learner: tuple[str, float], actors: dict[str, float], cores: int) -> list[dict]:
    name, learner_s = learner
    return [{"actors": precision, "learner": name, **limits(learner_s, actor_s, cores), "cores": cores}
            for precision, actor_s in actors.items()]


# --- the machine --------------------------------------------------------------------------------


def busy_cores(seconds: float = BUSY_SAMPLE_S) -> float:
    """Cores' worth of CPU the whole machine used over the next ``seconds``."""
    return psutil.cpu_percent(interval=seconds) / 100 * (os.cpu_count() or 1)


def quiet_enough(what: str, max_busy: float, wait_s: float, strict: bool) -> float:
    """Waits (up to ``wait_s``) for the machine's CPU use to fall to ``max_busy`` cores; then
    warns, or with ``strict`` refuses (exit code 2), if it has not. Returns the last sample."""
    deadline = time.monotonic() + wait_s
    busy = busy_cores()
    while busy > max_busy and time.monotonic() < deadline:
        busy = busy_cores()
    if busy > max_busy:
        message = f"{busy:.2f} cores busy before {what} (--max-busy {max_busy:g})"
        if strict:
            print(f"benchmarks.pixels_vs_sb3: error: {message}: the machine is not quiet; --strict refuses",
                  file=sys.stderr)
            sys.exit(2)
        print(f"warning: {message}: its frames/s are not this machine's alone", flush=True)
    return busy


def describe_machine(info: dict) -> str:
    flags = set(info["flags"])
    present = [flag for flag in CPU_FLAGS if flag in flags]
    absent = [flag for flag in CPU_FLAGS if flag not in flags]
    return (f"CPU: {info['cpu']}, {info['cores']} cores; flags: {' '.join(present) or '-'}"
            + (f" (no {' '.join(absent)})" if absent else "") + f"; commit {info['commit']}")


# --- the bench --------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pixels_vs_sb3", description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="breakout", choices=list(GAMES))
    parser.add_argument("--frames", type=int, default=None,
                        help=f"frames a row, a multiple of {ROLLOUT} (default 20480; --quick: 2048)")
    parser.add_argument("--rows", nargs="*", default=list(ROWS), choices=ROWS, help="the built-in rows to run")
    parser.add_argument("--ours", action="append", default=[], metavar="OVERRIDES",
                        help="a further row of ours with these overrides (space-separated); repeatable")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-busy", type=float, default=0.3, help="cores the machine may use before a row")
    parser.add_argument("--wait-s", type=float, default=None,
                        help="seconds to wait for a quiet machine before each row (default 120; --quick: 0)")
    parser.add_argument("--strict", action="store_true", help="refuse (exit 2) rather than warn on a busy machine")
    parser.add_argument("--no-alone", action="store_true", help="skip the learner-alone and actor-alone benches")
    parser.add_argument("--runs-dir", default="bench-results/pixels_vs_sb3", help="our rows' run dirs go here")
    parser.add_argument("--out", default="bench-results/pixels_vs_sb3.json", help="JSON output ('' for none)")
    parser.add_argument("--quick", action="store_true",
                        help="2048 frames a row, no waiting, the alone benches at their smoke sizes")
    args = parser.parse_args(argv)
    if args.frames is None:
        args.frames = 2 * ROLLOUT if args.quick else 20 * ROLLOUT
    if args.wait_s is None:
        args.wait_s = 0.0 if args.quick else 120.0
    if args.frames < 2 * ROLLOUT or args.frames % ROLLOUT:
        parser.error(f"--frames must be a multiple of {ROLLOUT}, at least {2 * ROLLOUT} (two rollouts)")
    if not args.rows and not args.ours:
        parser.error("no rows: name some with --rows or --ours")
    return args


def planned_rows(args: argparse.Namespace) -> list[tuple[str, tuple[str, ...] | None]]:
    """``(name, overrides)`` in the order they run; SB3's overrides are ``None``.

    Example:
        >>> planned_rows(argparse.Namespace(rows=["sb3", "int8"], ours=["quant.bits=8 actors.num_workers=2"]))
        [('sb3', None), ('int8', ('quant.bits=8', 'actors.collection=lockstep')), ('ours1', ('quant.bits=8', 'actors.num_workers=2'))]
    """
    rows = [(name, OURS.get(name)) for name in args.rows]
    return rows + [(f"ours{i}", tuple(shlex.split(text))) for i, text in enumerate(args.ours, 1)]


def peer_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("stable_baselines3") is not None


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse_args(argv)
    plan = planned_rows(args)
    if any(name == "sb3" for name, _ in plan) and not peer_installed():
        print(f"benchmarks.pixels_vs_sb3: Stable-Baselines3 is not installed: {INSTALL_PEER}, or leave it out "
              "with --rows fp32 int8 int8-async", file=sys.stderr)
        sys.exit(2)
    runs_dir = Path(args.runs_dir)
    load_start = os.getloadavg()
    info = machine(load_start)
    title = f"pixels_vs_sb3: PPO on {args.game}, {args.frames} frames a row ({args.frames // ROLLOUT} rollouts)"
    threads = os.environ.get("OMP_NUM_THREADS", "unset (torch's default)")
    print(f"{title}\n{describe_machine(info)}\nOMP_NUM_THREADS: {threads}", flush=True)
    rows, limit_table = [], []

    def save() -> None:
        if args.out:
            write_json(title, rows, args.out, machine=machine(load_start), limits=limit_table,
                       settings={"game": args.game, "frames": args.frames, "seed": args.seed,
                                 "omp_num_threads": os.environ.get("OMP_NUM_THREADS")})

    for index, (name, overrides) in enumerate(plan, 1):
        busy = quiet_enough(f"row {name}", args.max_busy, args.wait_s, args.strict)
        load = os.getloadavg()[0]
        print(f"[{index}/{len(plan)}] {name}: {busy:.2f} cores busy, load {load:.2f}; running", flush=True)
        if overrides is None:
            result = sb3_row(args.game, args.frames, args.seed)
        else:
            result = ours_row(args.game, overrides, args.frames, args.seed, runs_dir / name)
        rows.append({"row": name, **result, "busy_before": round(busy, 2), "load_before": round(load, 2),
                     "load_after": round(os.getloadavg()[0], 2)})
        print(f"[{index}/{len(plan)}] {name}: {result['steady_fps']:.0f} frames/s steady "
              f"({100 * result['learn_share']:.0f}% updating), {result['wall_s']:.0f} s in all; "
              f"load {rows[-1]['load_after']:.2f} after", flush=True)
        save()
    if not args.no_alone:
        ours = [row for row in rows if row["row"] != "sb3"]
        learner = ours[0]["learner"] if ours else "32-true"  # as our runs picked it
        quiet_enough("the learner alone", args.max_busy, args.wait_s, args.strict)
        learner_s = learner_alone_s("bf16" if learner.startswith("bf16") else "fp32", "channels-last" in learner,
                                    args.quick, runs_dir)
        quiet_enough("the actors alone", args.max_busy, args.wait_s, args.strict)
        limit_table += limit_rows((learner, learner_s), actors_alone_s(args.game, args.quick, runs_dir),
                                  len(os.sched_getaffinity(0)))
    annotate(rows, limit_table)
    save()
    print(f"\n{title}\n{format_table(rows_for_print(rows))}")
    if limit_table:
        print(f"\nlimits (frames/s; one core each side alone, learner {TRUNK} at one thread)\n"
              f"{format_table(limit_table)}")
    print(f"\n{describe_machine(machine(os.getloadavg()))}")
    return {"rows": rows, "limits": limit_table, "machine": info}


def annotate(rows: list[dict], limit_table: list[dict]) -> None:
    """Adds ``vs_sb3`` (steady frames/s over SB3's) and ``of_limit`` (over the ``packed_fps``
    of the row's actor precision) to each row."""
    sb3 = next((row["steady_fps"] for row in rows if row["row"] == "sb3"), None)
    packed = {limit["actors"]: limit["packed_fps"] for limit in limit_table}
    for row in rows:
        row["vs_sb3"] = row["steady_fps"] / sb3 if sb3 else None
        precision = "int8" if row["actors"].startswith("int8") else "fp32"
        row["of_limit"] = row["steady_fps"] / packed[precision] if precision in packed else None


def rows_for_print(rows: list[dict]) -> list[dict]:
    columns = ("row", "actors", "learner", "frames", "steady_fps", "vs_sb3", "of_limit", "learn_share", "startup_s",
               "wall_s", "busy_before", "load_before", "load_after", "overrides")
    return [{column: row.get(column) for column in columns} for row in rows]


if __name__ == "__main__":
    main()
