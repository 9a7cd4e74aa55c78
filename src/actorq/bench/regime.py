"""``actorq bench regime``: where int8 actors shorten a run on this machine.

Actors and learner run at the same time, so a run goes at about

    frames/s = min(actor frames/s, learner updates/s / update_to_data)

and int8 actors shorten it only where the actors are the slower side. This benchmark
measures both sides here, for TD3 on ``--env`` (cheetah-run) with a ``W x W x W`` actor:

1. actor frames/s of one real worker per width and precision (fp32, int8 static), as
   ``bench actors`` measures them;
2. learner updates/s per width and learner precision (the real TD3 update under the
   Lightning Trainer, batch 256, critic 256x256, ``trainer.precision`` 32-true and
   bf16-mixed), as ``bench learner`` measures them;
3. the predicted speedup of int8 over fp32 actors on a grid of widths x samples per
   insert (``update_to_data x batch_size``), one heatmap per learner precision (``--plot``):
   a faster learner moves runs into the region where int8 actors pay;
4. real short runs (``actorq train`` as a user runs it, fp32 and int8, same seed and
   budget) at ``--check`` cells, whose steady frames/s (from the TensorBoard
   ``collect/frames`` curve after learning starts) give the measured speedup beside the
   predicted one.

``--fleet`` switches to the fleet view of PPO on Atari (:mod:`actorq.bench.fleet_view`): the
run's frames/s with ``N`` actor cores beside one learner, fp32 and int8 actors.

Usage (``tests/integration/test_bench_smoke.py`` runs the quick form)::

    actorq bench regime [--quick] [--widths 256 1024 2048]
        [--update-to-data 0.0039 0.0625 1] [--learner-precision 32-true bf16-mixed]
        [--check 2048:0.00390625 2048:0.015625:bf16-mixed] [--plot FILE.png]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from hydra import compose, initialize_config_module

from actorq.algos.td3 import TD3
from actorq.algos.base import Exploration
from actorq.bench import actors as actor_bench
from actorq.bench._runs import steady_frames_per_s
from actorq.bench._table import report
from actorq.bench.learner import fake_experience, lightning_updates_per_s
from actorq.envs import EnvSpec, make_env
from actorq.quant import QuantSpec
from actorq.train import train
from actorq.util.arguments import as_options

PRECISIONS = {"fp32": QuantSpec(bits=32), "int8": QuantSpec(bits=8, mode="static")}  # the actors' copies
BATCH_SIZE = 256


def predicted_frames_per_s(actor_fps: float, learner_ups: float, update_to_data: float) -> float:
    """The slower side bounds the run.

    >>> predicted_frames_per_s(1000.0, 200.0, 0.5), predicted_frames_per_s(300.0, 200.0, 0.5)
    (400.0, 300.0)
    """
    return min(actor_fps, learner_ups / update_to_data)


def actor_rates(env: str, width: int, batches: int) -> dict[str, float]:
    """Frames/s of one real actor worker per precision (one env per worker)."""
    return {name: actor_bench.frames_per_s(env, actor_bench.actor_policy(env, width, quant), workers=1,
                                           frames_per_batch=128, batches=batches)
            for name, quant in PRECISIONS.items()}


def learner_rate(spec: EnvSpec, width: int, batches: int, precision: str, frames: int = 128) -> float:
    """TD3 updates/s under the Lightning Trainer with a ``width x 3`` actor at
    ``trainer.precision`` ``precision`` (the first batches fill the replay to a batch and warm
    up; the rest are timed)."""
    torch.manual_seed(0)
    learner = TD3(spec, Exploration(0.1), actor_hidden=(width,) * 3, critic_hidden=(256, 256),
                  batch_size=BATCH_SIZE, learning_starts=0, update_to_data=1.0)
    return lightning_updates_per_s(learner, fake_experience(spec, max(batches, 3), frames), precision)


def measured_speedup(env: str, width: int, update_to_data: float, precision: str, frames: int,
                     runs_dir: Path, quick: bool) -> dict[str, float]:
    """Steady frames/s of real fp32 and int8 runs at one cell, and their ratio."""
    rates = {}
    for bits, name in ((32, "fp32"), (8, "int8")):
        run_dir = runs_dir / f"w{width}-utd{update_to_data}-{precision}-{name}"
        overrides = [
            "env=cheetah_run", "algo=td3", f"algo.actor_hidden=[{width},{width},{width}]",
            f"algo.update_to_data={update_to_data}", f"quant.bits={bits}", "seed=0", f"run_dir={run_dir}",
            "callbacks=no_checkpoint", "~callbacks.carbon", f"actors.total_frames={frames}",
            "actors.frames_per_batch=128", f"actors.init_random_frames={frames // 10}",
            f"algo.learning_starts={frames // 10}", f"eval.every_frames={frames * 10}", "eval.episodes=1",
            "trainer.enable_progress_bar=false", f"trainer.precision={precision}",
        ]
        if quick:
            overrides.append("algo.batch_size=32")
        with initialize_config_module("actorq.conf", version_base="1.3"):
            cfg = compose("config", overrides=overrides)
        train(cfg)
        rates[name] = steady_frames_per_s(run_dir / "tb")
    return {**{f"{name}_fps": rate for name, rate in rates.items()}, "speedup": rates["int8"] / rates["fp32"]}


def heatmap(rows: list[dict], widths: list[int], ratios: list[float], precisions: list[str],
            path: Path) -> None:
    """Predicted speedup per (width, samples per insert), one panel per learner precision."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def cell(precision, width, ratio):
        return next(r["predicted_speedup"] for r in rows if r["learner_precision"] == precision
                    and r["width"] == width and r["update_to_data"] == ratio)

    grids = [[[cell(p, w, u) for u in ratios] for w in widths] for p in precisions]
    top = max(value for grid in grids for row in grid for value in row)
    figure, panels = plt.subplots(1, len(precisions), squeeze=False, sharey=True,
                                  figsize=(len(precisions) * (1.4 * len(ratios) + 1) + 1.5, 0.8 * len(widths) + 1.8))
    for axes, precision, grid in zip(panels[0], precisions, grids, strict=True):
        image = axes.imshow(grid, cmap="viridis", origin="lower", aspect="auto", vmin=min(1.0, top), vmax=top)
        axes.set_xticks(range(len(ratios)), [f"{u * BATCH_SIZE:g}" for u in ratios])
        axes.set_yticks(range(len(widths)), [f"{w}x3" for w in widths])
        axes.set_xlabel("samples per insert (update_to_data x batch 256)")
        axes.set_title(f"learner {precision}")
        for i, row in enumerate(grid):
            for j, value in enumerate(row):
                light = image.norm(value) > 0.5  # viridis runs from dark to light
                axes.text(j, i, f"{value:.2f}x", ha="center", va="center", color="black" if light else "white")
    panels[0][0].set_ylabel("actor MLP")
    figure.colorbar(image, ax=panels[0].tolist(), label="predicted int8 / fp32 frames/s")
    figure.suptitle("Where int8 actors pay (TD3, this machine)")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    fleet = fleet_argv(list(sys.argv[1:] if argv is None else argv))
    if fleet is not None:
        from actorq.bench import fleet_view

        return fleet_view.parse_args(fleet)
    parser = argparse.ArgumentParser(prog="actorq bench regime", description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="cheetah-run")
    parser.add_argument("--widths", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--update-to-data", type=float, nargs="+", default=[1 / 256, 1 / 64, 1 / 16, 0.25, 1.0],
                        help="learner updates per collected frame (x batch 256 = samples per insert)")
    parser.add_argument("--learner-precision", nargs="+", default=["32-true", "bf16-mixed"],
                        help="trainer.precision values to time the learner at (one map each)")
    parser.add_argument("--check", nargs="*", default=["2048:0.00390625", "2048:0.25", "2048:0.015625:bf16-mixed"],
                        help="WIDTH:UPDATE_TO_DATA[:LEARNER_PRECISION] cells to check with real fp32 and int8 "
                             "runs (learner precision: the first --learner-precision)")
    parser.add_argument("--check-seconds", type=float, default=40.0, help="rough length of each real run")
    parser.add_argument("--batches", type=int, default=6, help="timed batches per measurement")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--fleet", action="store_true",
                        help="the fleet view instead: PPO on Atari with N actor cores beside one learner, "
                             "predicted and checked by real runs (options: actorq bench regime --fleet --help)")
    parser.add_argument("--plot", default="bench-results/regime.png", help="heatmap PNG ('' for none)")
    parser.add_argument("--out", default="bench-results/regime.json", help="JSON output ('' for none)")
    args = parser.parse_args(as_options(argv, parser))
    if args.quick:
        args.widths, args.update_to_data, args.check, args.batches = [64], [0.25, 1.0], ["64:1.0"], 2
        args.check_seconds = 1.0
    for cell in args.check:
        parts = cell.split(":")
        if len(parts) not in (2, 3) or not parts[0].isdigit() or not parts[1]:
            parser.error(f"--check takes WIDTH:UPDATE_TO_DATA[:LEARNER_PRECISION] cells, got {cell!r}")
        if len(parts) == 3 and parts[2] not in args.learner_precision:
            parser.error(f"--check {cell}: learner precision {parts[2]!r} is not in --learner-precision")
    if any(u <= 0 for u in args.update_to_data):
        parser.error("--update-to-data values must be positive")
    return args


FLEET = ("--fleet", "fleet=true")
"""What switches ``bench regime`` to the fleet view (:mod:`actorq.bench.fleet_view`)."""


def fleet_argv(argv: Sequence[str]) -> list[str] | None:
    """The fleet view's arguments when ``argv`` asks for it, else ``None``."""
    return [arg for arg in argv if arg not in FLEET] if any(arg in FLEET for arg in argv) else None


def main(argv: Sequence[str] | None = None) -> list[dict]:
    argv = list(sys.argv[1:] if argv is None else argv)
    fleet = fleet_argv(argv)
    if fleet is not None:  # PPO on Atari: N actor cores beside one learner
        from actorq.bench import fleet_view

        return fleet_view.main(fleet)
    args = parse_args(argv)
    torch.set_num_threads(1)
    spec = EnvSpec.from_env(make_env(args.env, seed=0))
    sides = {width: measure_sides(spec, args, width) for width in args.widths}
    rows = [grid_row(width, ratio, precision, *sides[width])
            for precision in args.learner_precision for width in args.widths for ratio in args.update_to_data]
    runs_dir = Path(tempfile.mkdtemp(prefix="actorq-regime-"))
    for cell in args.check:
        width, ratio, *rest = cell.split(":")
        width, ratio, precision = int(width), float(ratio), (rest or args.learner_precision)[0]
        actors, learner = sides.get(width) or measure_sides(spec, args, width)
        fps = predicted_frames_per_s(actors["fp32"], learner[precision], ratio)
        frames = max(1000, int(fps * args.check_seconds) // 128 * 128)
        measured = measured_speedup(args.env, width, ratio, precision, frames, runs_dir, args.quick)
        row = next((r for r in rows if (r["width"], r["update_to_data"], r["learner_precision"])
                    == (width, ratio, precision)), None)
        if row is None:
            print(f"--check {cell}: not on the grid; measured speedup {measured['speedup']:.2f}x")
            continue
        row.update(measured_speedup=measured["speedup"], measured_fps_fp32=measured["fp32_fps"],
                   measured_fps_int8=measured["int8_fps"])
    report(f"regime: predicted (and measured) int8/fp32 frames/s, TD3 on {args.env}, batch {BATCH_SIZE}",
           rows, args.out or None)
    if args.plot:
        heatmap(rows, args.widths, args.update_to_data, args.learner_precision, Path(args.plot))
        print(f"Heatmap: {args.plot}")
    return rows


def measure_sides(spec: EnvSpec, args: argparse.Namespace, width: int) -> tuple[dict, dict]:
    """Actor frames/s per actor precision and learner updates/s per learner precision."""
    actors = actor_rates(args.env, width, args.batches)
    learner = {precision: learner_rate(spec, width, args.batches, precision) for precision in args.learner_precision}
    print(f"width {width}: actor frames/s fp32 {actors['fp32']:.0f}, int8 {actors['int8']:.0f}; learner updates/s "
          + ", ".join(f"{precision} {updates:.1f}" for precision, updates in learner.items()), flush=True)
    return actors, learner


def grid_row(width: int, ratio: float, precision: str, actors: dict, learner: dict) -> dict:
    updates = learner[precision]
    fp32, int8 = (predicted_frames_per_s(actors[p], updates, ratio) for p in ("fp32", "int8"))
    return {"learner_precision": precision, "width": width, "update_to_data": ratio,
            "samples_per_insert": ratio * BATCH_SIZE, "actor_fps_fp32": actors["fp32"],
            "actor_fps_int8": actors["int8"], "learner_ups": updates, "predicted_fps_fp32": fp32,
            "predicted_fps_int8": int8, "predicted_speedup": int8 / fp32,
            "bound": "actors" if fp32 < updates / ratio else "learner", "measured_fps_fp32": float("nan"),
            "measured_fps_int8": float("nan"), "measured_speedup": float("nan")}


if __name__ == "__main__":
    main()
