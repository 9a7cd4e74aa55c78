"""``python -m benchmarks.fidelity_curves LABEL=RUN_DIR ... --out FILE.png``: the held-out
fidelity of every push over whole runs, for any learner family.

Reads each run's TensorBoard events and draws, against env frames, the fidelity metric the run's
pushes logged on held-out recent observations (:func:`actorq.quant.policy_divergence`):
``quant/kl`` (stochastic policies), ``quant/action_error`` with ``quant/action_error_max``
(deterministic actors, a fraction of the action range) or ``1 - quant/greedy_agreement``
(Q-networks), one panel per metric, log scale. Prints each run's mean and worst push.

Usage::

    python -m benchmarks.fidelity_curves "td3 int8=RUN_A" "d4pg int8=RUN_B" --out fidelity.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks.kl_curves import FLOOR, series  # noqa: E402

# metric -> (what the panel calls it, how to draw a value)
METRICS = {
    "quant/kl": ("KL(mu || pi), held-out mean", lambda value: value),
    "quant/action_error": ("|a_pi - a_mu| / action range", lambda value: value),
    "quant/greedy_agreement": ("1 - greedy agreement", lambda value: 1.0 - value),
}


def run_metric(run_dir: Path) -> str | None:
    """The fidelity metric a run logged (``None`` if none)."""
    for metric in METRICS:
        if series(run_dir, metric):
            return metric
    return None


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="LABEL=RUN_DIR")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    runs = [(label, Path(path), run_metric(Path(path))) for label, path in (run.split("=", 1) for run in args.runs)]
    missing = [label for label, _, metric in runs if metric is None]
    if missing:
        parser.error(f"no held-out fidelity metric in the TensorBoard events of: {', '.join(missing)}")
    metrics = list(dict.fromkeys(metric for _, _, metric in runs))
    figure, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 3.8), squeeze=False)
    rows = []
    for label, run_dir, metric in runs:
        axis = axes[0][metrics.index(metric)]
        name, draw = METRICS[metric]
        points = series(run_dir, metric)
        line, = axis.plot([f for f, _ in points], [max(draw(v), FLOOR) for _, v in points], lw=0.8, label=label)
        worst = series(run_dir, metric + "_max") if metric == "quant/action_error" else []
        if worst:
            axis.plot([f for f, _ in worst], [max(v, FLOOR) for _, v in worst], lw=0.6, ls=":", color=line.get_color())
        values = [draw(v) for _, v in points]
        rows.append({"run": label, "metric": metric, "pushes": len(values), "mean": sum(values) / len(values),
                     "worst": max(values), "worst_step": max((v for _, v in worst), default=None)})
        title = f"{metric} (solid: mean, dotted: largest)" if worst else metric
        axis.set(yscale="log", xlabel="env frames", ylabel=name, title=title)
        axis.legend(fontsize=8)
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=110)
    for row in rows:
        step = "" if row["worst_step"] is None else f", largest single observation {row['worst_step']:.4g}"
        print(f"{row['run']}: {row['pushes']} pushes of {row['metric']}, mean {row['mean']:.4g}, "
              f"worst push {row['worst']:.4g}{step}")
    print(f"wrote {args.out}")
    return rows


if __name__ == "__main__":
    main()
