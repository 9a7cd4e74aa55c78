"""``python -m benchmarks.kl_curves LABEL=RUN_DIR ... --out FILE.png``: the behaviour KL of
every rollout of on-policy runs, with the policy's entropy beside it.

Reads each run's TensorBoard events (``train/kl_behaviour``: ``KL(mu || pi_prox)`` estimated on
the actors' own actions; ``train/entropy``) and draws both against env frames, one line per run,
the KL on a log scale. Prints each run's largest and mean per-rollout KL and its mean
``train/ratio_spread`` (the mean ``exp(|log pi_prox - log mu|)``, where the run logged it).

Usage::

    python -m benchmarks.kl_curves "int8 before=RUN_A" "int8 now=RUN_B" "fp32=RUN_C" --out kl.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

FLOOR = 1e-8  # fp32 actors' KL is float rounding: drawn at this floor on the log scale


def series(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    """``[(frames, value), ...]`` of one scalar over a run's event files."""
    out: list[tuple[int, float]] = []
    for path in sorted((run_dir / "tb").iterdir()):
        events = EventAccumulator(str(path), size_guidance={"scalars": 0})
        events.Reload()
        if tag in events.Tags()["scalars"]:
            out.extend((event.step, event.value) for event in events.Scalars(tag))
    return sorted(out)


def describe(label: str, run_dir: Path) -> dict:
    kl = [value for _, value in series(run_dir, "train/kl_behaviour")]
    spread = [value for _, value in series(run_dir, "train/ratio_spread")]
    return {"run": label, "rollouts": len(kl), "kl_max": max(kl), "kl_mean": sum(kl) / len(kl),
            "ratio_spread_mean": sum(spread) / len(spread) if spread else None}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="LABEL=RUN_DIR")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    runs = [(label, Path(path)) for label, path in (run.split("=", 1) for run in args.runs)]
    figure, (kl_axis, entropy_axis) = plt.subplots(1, 2, figsize=(11, 3.8))
    rows = []
    for label, run_dir in runs:
        kl = series(run_dir, "train/kl_behaviour")
        entropy = series(run_dir, "train/entropy")
        kl_axis.plot([f for f, _ in kl], [max(v, FLOOR) for _, v in kl], lw=0.7, label=label)
        entropy_axis.plot([f for f, _ in entropy], [v for _, v in entropy], lw=0.9, label=label)
        rows.append(describe(label, run_dir))
    kl_axis.set(yscale="log", xlabel="env frames", ylabel="KL(mu || pi_prox) per rollout",
                title="behaviour KL of each rollout")
    kl_axis.axhline(0.02, color="grey", ls="--", lw=0.8)
    entropy_axis.set(xlabel="env frames", ylabel="policy entropy", title="entropy")
    kl_axis.legend(fontsize=8)
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=110)
    for row in rows:
        spread = "" if row["ratio_spread_mean"] is None else f", mean exp|log ratio| {row['ratio_spread_mean']:.4f}"
        print(f"{row['run']}: {row['rollouts']} rollouts, largest KL {row['kl_max']:.4g}, "
              f"mean {row['kl_mean']:.4g}{spread}")
    print(f"wrote {args.out}")
    return rows


if __name__ == "__main__":
    main()
