"""``python -m benchmarks.run_curves``: the evaluation curves of whole run dirs (``actorq train``
runs, resumed or not) on one plot, a curve per run, and each run's frames to a target return.

Usage::

    python -m benchmarks.run_curves --name ppo_pong_runs --target 18 --out docs/img/results \\
        "int8, seed 0=runs/pong-int8-s0" "fp32, seed 0=runs/pong-fp32-s0"

Writes ``NAME_return_vs_frames.png`` into ``--out``; with ``--alone`` (every run had the
machine to itself) also ``NAME_return_vs_time.png``. Prints, per run, the first evaluation at
or above ``--target`` (frames and seconds from the first collected frame).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from actorq.report import plot_experiment, read_run, time_to_target


def parse_source(text: str) -> tuple[str, Path]:
    """``LABEL=RUN_DIR`` -> ``(label, run_dir)``.

    >>> parse_source("int8, seed 1=/runs/pong-int8-s1")
    ('int8, seed 1', PosixPath('/runs/pong-int8-s1'))
    """
    label, _, folder = text.rpartition("=")
    if not (label and folder):
        raise argparse.ArgumentTypeError(f"{text!r}: give LABEL=RUN_DIR")
    return label, Path(folder)


def main(argv: Sequence[str] | None = None) -> dict[str, tuple[float, float] | None]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run_curves", description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="the plots' title and file name stem")
    parser.add_argument("--out", type=Path, default=Path("."), help="folder the plots go to")
    parser.add_argument("--target", type=float, default=None, help="the return whose first reach is printed")
    parser.add_argument("--alone", action="store_true", help="every run had the machine alone: plot wall-clock too")
    parser.add_argument("sources", nargs="+", type=parse_source, metavar="LABEL=RUN_DIR")
    args = parser.parse_args(argv)
    runs = {}
    for label, folder in args.sources:
        run = read_run(folder)
        if not run.evals:
            parser.error(f"{folder} has no evaluation in its TensorBoard events")
        runs[label] = [run]
    args.out.mkdir(parents=True, exist_ok=True)
    axes = ("time", "frames") if args.alone else ("frames",)
    files = plot_experiment(args.name, runs, args.out, target=args.target, axes=axes)
    reached = {}
    for label, (run,) in runs.items():
        reached[label] = time_to_target(run, args.target) if args.target is not None else None
        last = run.evals[-1]
        where = "" if reached[label] is None else f"; first >= {args.target:g} at {reached[label][1]:.0f} frames, " \
                                                  f"{reached[label][0]:.0f} s"
        print(f"{label}: last {last[2]:.1f} at {last[1]:.0f} frames{where}")
    print("\n".join(str(f) for f in files))
    return reached


if __name__ == "__main__":
    main()
