"""``python -m benchmarks.compare_curves``: one task's curves from several results out-dirs on
one plot, each out-dir's cells of one implementation under a label of its own: an A/B run with
``python -m benchmarks.results --ours KEY=VALUE --out-dir B`` beside the default's cells in A.

Usage::

    python -m benchmarks.compare_curves --task ppo_breakout --name breakout_lockstep_vs_async \\
        --out docs/img/results "async (default)=A:actorq-int8" "lock-step=B:actorq-int8" "SB3=A:sb3"

Writes ``NAME_return_vs_frames.png`` (and ``..._vs_time.png``, meaningful only where every cell
ran alone) into ``--out`` and prints each label's final returns (mean ± population standard
deviation, as the results table).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path

from actorq.report import plot_experiment
from benchmarks.results_table import as_run, read_cells


def parse_source(text: str) -> tuple[str, Path, str]:
    """``LABEL=OUT_DIR:IMPL`` -> ``(label, out_dir, impl)``.

    >>> parse_source("lock-step=/runs/b:actorq-int8")
    ('lock-step', PosixPath('/runs/b'), 'actorq-int8')
    """
    label, _, rest = text.partition("=")
    folder, _, impl = rest.rpartition(":")
    if not (label and folder and impl):
        raise argparse.ArgumentTypeError(f"{text!r}: give LABEL=OUT_DIR:IMPL")
    return label, Path(folder), impl


def main(argv: Sequence[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare_curves", description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--name", required=True, help="the plots' title and file name stem")
    parser.add_argument("--out", type=Path, default=Path("."), help="folder the plots go to")
    parser.add_argument("sources", nargs="+", type=parse_source, metavar="LABEL=OUT_DIR:IMPL")
    args = parser.parse_args(argv)
    curves, finals = {}, {}
    for label, folder, impl in args.sources:
        cells = [c for c in read_cells(folder) if c["task"] == args.task and c["impl"] == impl]
        if not cells:
            parser.error(f"{folder} has no finished {args.task} cells of {impl}")
        curves[label] = [as_run(c) for c in cells]
        finals[label] = [c["final_return"] for c in sorted(cells, key=lambda c: c["seed"])]
    args.out.mkdir(parents=True, exist_ok=True)
    files = plot_experiment(args.name, curves, args.out, target=None)
    for label, values in finals.items():
        spread = f" ± {statistics.pstdev(values):.1f}" if len(values) > 1 else ""  # as the results table
        print(f"{label}: {statistics.fmean(values):.1f}{spread} ({', '.join(f'{v:.1f}' for v in values)})")
    print("\n".join(str(f) for f in files))
    return finals


if __name__ == "__main__":
    main()
