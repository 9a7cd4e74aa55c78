"""``python -m actorq.report DIR... [--out DIR]``: sweep dirs -> ``report.md`` + plots.

Compares precisions the way QuaRL's ActorQ figures do: eval return against wall-clock
seconds and against env frames (mean over seeds with a min-max band, one curve per
precision), and a table per experiment with final returns, time to a target return and the
speedup, energy and CO2 and the reduction against fp32, broadcast payload, actor frames/s
and the collect fraction.

Each DIR is a run dir (it holds ``config.yaml``) or any folder above run dirs (a Hydra sweep
dir). A run is read from its ``config.yaml``, ``summary.json`` and TensorBoard events
(``tb/``). A run dir without ``summary.json`` (the run crashed or was stopped), or whose
summary has a ``"status"`` other than ``"completed"``, is listed as such and kept out of
every mean.

Example:
    >>> target_return(200.0, 0.9), target_return(-150.0, 0.9)
    (180.0, -165.0)
    >>> mean_std([1.0, 3.0])
    '2.0 ± 1.0'
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

FP32 = "fp32"


@dataclass
class Run:
    """One run dir as the report sees it."""

    path: Path
    env: str
    algo: str
    seed: Any
    precision: str
    status: str  # "completed", "crashed (no summary.json)", or the summary's own status
    experiment: str | None = None
    summary: dict = field(default_factory=dict)
    evals: list[tuple[float, float, float]] = field(default_factory=list)  # (seconds, frames, return)
    broadcast_bytes: float | None = None
    broadcasts: float | None = None

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def group(self) -> str:
        return f"{self.algo} on {self.env}"


# --- reading runs ---------------------------------------------------------------------


def find_run_dirs(paths: list[Path]) -> list[Path]:
    """Run dirs under each path: folders with ``config.yaml`` or (a job that died before
    writing it) Hydra's ``.hydra/config.yaml``."""
    found: set[Path] = set()
    for path in paths:
        if not path.is_dir():
            raise FileNotFoundError(f"no such directory: {path}")
        for config in [path / "config.yaml", *path.rglob("config.yaml")]:
            if not config.is_file():
                continue
            run_dir = config.parent.parent if config.parent.name == ".hydra" else config.parent
            if ".hydra" not in run_dir.parts and "tb" not in run_dir.relative_to(path).parts:
                found.add(run_dir)
    return sorted(found)


def read_run(run_dir: Path) -> Run:
    config_file = run_dir / "config.yaml"
    if not config_file.is_file():
        config_file = run_dir / ".hydra" / "config.yaml"
    config = yaml.safe_load(config_file.read_text()) or {}
    summary_file = run_dir / "summary.json"
    summary: dict = {}
    if summary_file.is_file():
        try:
            summary = json.loads(summary_file.read_text())
            status = str(summary.get("status", "completed"))
            if summary.get("error"):  # a failed run says why
                status += f" ({summary['error']})"
        except json.JSONDecodeError:
            status = "crashed (unreadable summary.json)"
    else:
        status = "crashed (no summary.json)"
    run = Run(
        path=run_dir, env=str(config.get("env", {}).get("name", "?")),
        algo=str(config.get("algo", {}).get("_target_", "?")).rsplit(".", 1)[-1],
        seed=config.get("seed"), precision=summary.get("actor_precision") or precision_of(config),
        status=status, experiment=experiment_of(run_dir), summary=summary,
    )
    read_events(run)
    return run


def precision_of(config: dict) -> str:
    """The precision a run without a summary was configured for, named as the summary
    would name it (``QuantSpec.describe``), or ``bits=N`` when that cannot be built."""
    node = config.get("quant") or {}
    try:
        from hydra.utils import instantiate

        return instantiate(node).describe()
    except Exception:  # noqa: BLE001 - a crashed run's config may not even build
        return f"bits={node.get('bits', '?')}"


def experiment_of(run_dir: Path) -> str | None:
    overrides = run_dir / ".hydra" / "overrides.yaml"
    if overrides.is_file():
        for item in yaml.safe_load(overrides.read_text()) or []:
            match = re.fullmatch(r"\+?experiment=(\S+)", str(item))
            if match:
                return match.group(1)
    return None


def read_events(run: Run) -> None:
    """Eval returns against seconds (since the run's first TensorBoard event) and frames;
    the broadcast payload size and count."""
    tb = run.path / "tb"
    if not tb.is_dir():
        return
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tb), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    try:
        origin = events.FirstEventTimestamp()
    except ValueError:
        return
    if "eval/return_mean" in tags:
        run.evals = [(e.wall_time - origin, float(e.step), e.value) for e in events.Scalars("eval/return_mean")]
    if "quant/broadcast_bytes" in tags:
        run.broadcast_bytes = events.Scalars("quant/broadcast_bytes")[-1].value
    if "quant/broadcasts" in tags:
        run.broadcasts = max(e.value for e in events.Scalars("quant/broadcasts"))


# --- numbers --------------------------------------------------------------------------


def target_return(fp32_final_mean: float, fraction: float) -> float:
    """Within ``1 - fraction`` of the fp32 final mean's magnitude: ``0.9 * 200 = 180``;
    for negative returns (Pendulum) ``-150 - 0.1 * 150 = -165``."""
    return fp32_final_mean - (1.0 - fraction) * abs(fp32_final_mean)


def time_to_target(run: Run, target: float) -> tuple[float, float] | None:
    """(seconds, frames) of the run's first evaluation at or above ``target``."""
    return next(((s, f) for s, f, r in run.evals if r >= target), None)


def mean_std(values: list[float], digits: int = 1) -> str:
    if not values:
        return "—"
    std = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.{digits}f} ± {std:.{digits}f}"


def mean_or_none(values: list[float | None]) -> float | None:
    """The mean, or ``None`` when any value is missing (never a mean of part of the seeds)."""
    if not values or any(v is None for v in values):
        return None
    return statistics.fmean(values)


def fmt(value: float | None, spec: str = ".3g", suffix: str = "") -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:{spec}}{suffix}"


def precision_order(name: str) -> tuple[int, str]:
    return (0 if name == FP32 else 1, name)


# --- the report -----------------------------------------------------------------------


def group_runs(runs: list[Run]) -> dict[str, dict[str, list[Run]]]:
    groups: dict[str, dict[str, list[Run]]] = {}
    for run in runs:
        groups.setdefault(run.group, {}).setdefault(run.precision, []).append(run)
    return {g: dict(sorted(p.items(), key=lambda kv: precision_order(kv[0]))) for g, p in sorted(groups.items())}


def experiment_table(precisions: dict[str, list[Run]], target_override: float | None,
                     fraction: float) -> tuple[list[str], float | None, str]:
    """Markdown table rows for one experiment, the target return and how it was set."""
    done = {p: [r for r in runs if r.completed] for p, runs in precisions.items()}
    fp32_finals = [r.summary["final_return"] for r in done.get(FP32, []) if r.summary.get("final_return") is not None]
    if target_override is not None:
        target, how = target_override, "--target-return"
    elif fp32_finals:
        target = target_return(statistics.fmean(fp32_finals), fraction)
        how = f"fp32 final mean less {1 - fraction:.0%} of its magnitude"
    else:
        target, how = None, "no completed fp32 run to take it from; pass --target-return"
    header = ("| precision | seeds | final return | int8 policy's own return | time to target (s) "
              "| frames to target | speedup vs fp32 | kWh | kg CO2 | carbon reduction vs fp32 "
              "| broadcast bytes (per push x pushes) | actor frames/s | collect fraction |")
    rows = [header, "|" + "---|" * (header.count("|") - 1)]
    stats: dict[str, dict[str, float | None]] = {}
    for precision, runs in precisions.items():
        ok = done[precision]
        reached = [time_to_target(r, target) for r in ok] if target is not None else []
        hit = [x for x in reached if x is not None]
        stats[precision] = {
            "time": statistics.fmean(s for s, _ in hit) if hit and len(hit) == len(ok) else None,
            "co2": mean_or_none([r.summary.get("energy", {}).get("co2_kg") for r in ok]),
        }
    base = stats.get(FP32, {})
    for precision, runs in precisions.items():
        ok = done[precision]
        lost = [r for r in runs if not r.completed]
        seeds = f"{len(ok)} of {len(runs)} completed" + (f" ({len(lost)} missing/crashed)" if lost else "")
        finals = [r.summary["final_return"] for r in ok if r.summary.get("final_return") is not None]
        quant = [r.summary["final_return_quant"] for r in ok if r.summary.get("final_return_quant") is not None]
        if target is None or not ok:
            t_cell = f_cell = "—"
        else:
            reached = [time_to_target(r, target) for r in ok]
            hit = [x for x in reached if x is not None]
            note = "" if len(hit) == len(ok) else f" ({len(hit)} of {len(ok)} reached)"
            t_cell = (mean_std([s for s, _ in hit]) + note) if hit else f"not reached{note}"
            f_cell = mean_std([f for _, f in hit], 0) if hit else "—"
        mine = stats[precision]
        speedup = (base["time"] / mine["time"]) if base.get("time") and mine["time"] else None
        kwh = mean_or_none([r.summary.get("energy", {}).get("kwh") for r in ok])
        reduction = (base["co2"] / mine["co2"]) if base.get("co2") and mine["co2"] else None
        per_push = mean_or_none([r.broadcast_bytes for r in ok])
        pushes = mean_or_none([r.broadcasts for r in ok])
        bytes_cell = f"{fmt(per_push, '.0f')} x {fmt(pushes, '.0f')}" if per_push is not None else "—"
        rows.append(
            f"| {precision} | {seeds} | {mean_std(finals)} | {mean_std(quant) if quant else '—'} | {t_cell} "
            f"| {f_cell} | {fmt(speedup, '.2f', 'x')} | {fmt(kwh, '.3g')} | {fmt(mine['co2'], '.3g')} "
            f"| {fmt(reduction, '.2f', 'x')} | {bytes_cell} "
            f"| {fmt(mean_or_none([r.summary.get('frames_per_s') for r in ok]), '.0f')} "
            f"| {fmt(mean_or_none([r.summary.get('collect_fraction') for r in ok]), '.2f')} |"
        )
    return rows, target, how


def plot_experiment(name: str, precisions: dict[str, list[Run]], out: Path, target: float | None) -> list[Path]:
    """Two PNGs: eval return vs wall-clock seconds and vs env frames, mean and min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    files = []
    slug = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").lower()
    for axis, index, label in (("time", 0, "wall-clock (s)"), ("frames", 1, "env frames")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for precision, runs in precisions.items():
            curves = [r.evals for r in runs if r.completed and r.evals]
            if not curves:
                continue
            end = min(c[-1][index] for c in curves)
            start = min(c[0][index] for c in curves)
            # The seeds' own evaluation points, up to where the shortest seed ends.
            grid = np.unique([p[index] for c in curves for p in c if start <= p[index] <= end])
            values = np.array([np.interp(grid, [p[index] for p in c], [p[2] for p in c]) for c in curves])
            seeds = f"{len(curves)} seed{'s' if len(curves) > 1 else ''}"
            line, = ax.plot(grid, values.mean(0), marker="o", markersize=3, label=f"{precision} ({seeds})")
            if len(curves) > 1:
                ax.fill_between(grid, values.min(0), values.max(0), color=line.get_color(), alpha=0.2)
        if target is not None:
            ax.axhline(target, color="grey", linestyle=":", linewidth=1, label="target")
        ax.set_xlabel(label)
        ax.set_ylabel("eval return")
        ax.set_title(name)
        ax.legend()
        fig.tight_layout()
        path = out / f"{slug}_return_vs_{axis}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        files.append(path)
    return files


def duplicate_seeds(precisions: dict[str, list[Run]]) -> list[str]:
    """A note for each seed that several runs of one precision share (e.g. the same sweep
    given twice): each run still counts as one sample."""
    notes = []
    for precision, runs in precisions.items():
        seeds = [r.seed for r in runs]
        for seed in sorted({s for s in seeds if seeds.count(s) > 1}, key=str):
            notes.append(f"Note: {seeds.count(seed)} {precision} runs have seed {seed}; each counts as a sample.")
    return [*notes, ""] if notes else []


def energy_notes(runs: list[Run]) -> list[str]:
    """How the energy figures were measured (or why not), one line per distinct way."""
    notes: dict[str, int] = {}
    for run in runs:
        energy = run.summary.get("energy")
        if not run.completed or not energy:
            continue
        if energy.get("kwh") is None:
            line = f"not measured: {energy.get('reason', 'no reason recorded')}"
        else:
            method = ", ".join(f"{k}: {v}" for k, v in (energy.get("method") or {}).items())
            where = (energy.get("country_iso_code") or "?") + (f"/{energy['region']}" if energy.get("region") else "")
            line = (f"{energy.get('tool', 'codecarbon')} {energy.get('codecarbon_version', '')}, "
                    f"{energy.get('tracking_mode')} tracking, {method}; carbon intensity of {where}")
        notes[line] = notes.get(line, 0) + 1
    return [f"- {line} ({n} run{'s' if n > 1 else ''})" for line, n in notes.items()]


def write_report(paths: list[Path], out: Path, target_override: float | None = None,
                 target_fraction: float = 0.9) -> Path:
    """Reads every run under ``paths`` and writes ``out/report.md`` and its PNGs."""
    runs = [read_run(d) for d in find_run_dirs(paths)]
    if not runs:
        raise FileNotFoundError(f"no run dirs (config.yaml) under {', '.join(map(str, paths))}")
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# actorq precision comparison", "",
             f"{len(runs)} runs from {', '.join(f'`{p}`' for p in paths)}; "
             f"{sum(r.completed for r in runs)} completed.", "",
             "Final return: the fp32 learner policy's last greedy evaluation (mean ± std over completed seeds); "
             "int8 policy's own return: the actors' quantized policy run greedily. Time to target: wall-clock "
             "from the run's first TensorBoard event to its first evaluation at or above the target. kWh and "
             "CO2 cover the whole machine during the fit (codecarbon, machine mode). A missing or crashed seed "
             "is counted in *seeds* and listed below, never averaged in; a column whose seeds are not all "
             "measured shows —.", ""]
    for name, precisions in group_runs(runs).items():
        experiments = sorted({r.experiment for rs in precisions.values() for r in rs if r.experiment})
        rows, target, how = experiment_table(precisions, target_override, target_fraction)
        lines += [f"## {name}" + (f" ({', '.join(experiments)})" if experiments else ""), "",
                  f"Target return: {fmt(target, '.1f')} ({how}).", "", *rows, "",
                  *duplicate_seeds(precisions)]
        for path in plot_experiment(name, precisions, out, target):
            lines += [f"![{path.stem}]({path.name})", ""]
    lines += ["## Energy measurement", "", *(energy_notes(runs) or ["- no energy figures in the summaries"]), ""]
    lost = [r for r in runs if not r.completed]
    lines += ["## Missing or crashed runs", ""]
    lines += [f"- `{r.path}`: {r.group}, {r.precision}, seed {r.seed}: {r.status}" for r in lost] or ["- none"]
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report


def terminal_summary(markdown: str) -> str:
    """The report's sections and tables as they read in a terminal: no intro, no images."""
    body = markdown.split("\n## ", 1)[-1]
    lines = [line for line in ("## " + body).splitlines() if not line.startswith("![")]
    return "\n".join(line for i, line in enumerate(lines) if line or (i and lines[i - 1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m actorq.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="sweep dirs or run dirs")
    parser.add_argument("--out", type=Path, help="where report.md and the PNGs go (default: the first DIR)")
    parser.add_argument("--target-return", type=float, help="the return whose time to reach is compared")
    parser.add_argument("--target-fraction", type=float, default=0.9,
                        help="without --target-return: the target is this fraction of the fp32 final mean")
    args = parser.parse_args(argv)
    if not 0 < args.target_fraction <= 1:
        parser.error(f"--target-fraction must be in (0, 1], got {args.target_fraction}")
    try:
        report = write_report(args.dirs, args.out or args.dirs[0], args.target_return, args.target_fraction)
    except FileNotFoundError as error:
        print(f"actorq.report: error: {error}", file=sys.stderr)
        return 2
    print(terminal_summary(report.read_text()))
    print(f"Report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
