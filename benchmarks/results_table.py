"""The results table of ``python -m benchmarks.results``, rebuilt from its finished cells:
``results.json``, ``results.md`` and two plots per task (return vs frames and vs wall-clock,
ours fp32, ours int8 and SB3 on one axis, mean with a min-max band over seeds).

Columns: return at the budget (the last evaluation) mean ± std over seeds (the population std,
``np.std``, as RL Zoo's tables give it); time to the peer's
final return (the first evaluation at or above SB3's mean final return, seconds from the first
collected frame, mean over the seeds that reach it); total wall-clock of a cell (start-up and
evaluations included); learner updates/s (time inside the update alone); frames/s of the
whole cell (frames / total wall-clock).

The int8 test: int8 actors pass when the int8 cells' mean return at the budget is at least
the lowest fp32 seed's (within the fp32 seed range, or better); with fewer than three seeds a
side it gives no verdict. Below it, the regime map's
prediction of int8 over fp32 frames/s beside the measured ratio
(:mod:`benchmarks.results_regime`).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from actorq.util.atomic import write_text_atomically
from benchmarks import results_regime
from actorq.report import MIN_SEEDS, Run, fmt, mean_std, plot_experiment, time_to_target

ORDER = ("actorq-fp32", "actorq-int8", "sb3")


def read_cells(out_dir: Path) -> list[dict]:
    """Every finished cell (one whose ``cell.json`` exists) under ``out_dir/cells``."""
    return [json.loads(path.read_text()) for path in sorted(Path(out_dir).glob("cells/*/cell.json"))]


def as_run(cell: dict) -> Run:
    """A cell as :mod:`actorq.report` sees a run: evaluations as (seconds, frames, return)."""
    evals = [(p["wall_s"], float(p["frames"]), p["return"]) for p in cell["curve"]]
    return Run(path=Path(cell["task"]), env=cell["env"], algo=cell["task"], seed=cell["seed"],
               precision=cell["impl"], status="completed", evals=evals)


def int8_verdict(fp32: list[float], int8: list[float]) -> str:
    """Whether int8 actors reach the fp32 return within seed noise; no verdict below
    `MIN_SEEDS` seeds a side, where the lowest fp32 seed is one draw, not a noise band.

    Example:
        >>> int8_verdict([400.0, 480.0, 500.0], [450.0, 390.0, 470.0])
        'pass: int8 mean 436.7 >= lowest fp32 seed 400.0'
        >>> int8_verdict([400.0, 480.0, 500.0], [300.0, 390.0, 350.0])
        'fail: int8 mean 346.7 < lowest fp32 seed 400.0'
        >>> int8_verdict([400.0, 480.0], [300.0])
        '— (2 fp32 and 1 int8 seeds; a verdict needs 3 a side)'
    """
    if min(len(fp32), len(int8)) < MIN_SEEDS:
        return f"— ({len(fp32)} fp32 and {len(int8)} int8 seeds; a verdict needs {MIN_SEEDS} a side)"
    mean, low = statistics.fmean(int8), min(fp32)
    return f"pass: int8 mean {mean:.1f} >= lowest fp32 seed {low:.1f}" if mean >= low else \
        f"fail: int8 mean {mean:.1f} < lowest fp32 seed {low:.1f}"


def task_rows(cells: list[dict]) -> tuple[list[dict], float | None]:
    """One row per implementation of one task, and the peer's mean final return (the target)."""
    by_impl = {impl: [c for c in cells if c["impl"] == impl] for impl in ORDER}
    peer = [c["final_return"] for c in by_impl["sb3"]]
    target = statistics.fmean(peer) if peer else None
    rows = []
    for impl, group in by_impl.items():
        if not group:
            continue
        reached = [time_to_target(as_run(c), target) for c in group] if target is not None else []
        times = [r[0] for r in reached if r is not None]
        rows.append({
            "impl": impl, "seeds": sorted(c["seed"] for c in group),
            "return": [c["final_return"] for c in group],
            "frames": statistics.fmean(c["frames"] for c in group),
            "time_to_peer_s": statistics.fmean(times) if times else None,
            "reached_peer": f"{len(times)}/{len(group)}" if target is not None else None,
            "wall_clock_s": statistics.fmean(c["wall_clock_s"] for c in group),
            "updates_per_s": _mean([c["updates_per_s"] for c in group]),
            "frames_per_s": statistics.fmean(c["frames"] / c["wall_clock_s"] for c in group),
        })
    return rows, target


def summarize(out_dir: Path) -> dict:
    """Writes ``results.json``, ``results.md`` and ``plots/`` from the finished cells; returns
    the document."""
    out_dir = Path(out_dir)
    cells = read_cells(out_dir)
    tasks = list(dict.fromkeys(c["task"] for c in cells))
    document = {"tasks": {}, "machines": _machines(cells), "cells": len(cells)}
    plots = out_dir / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    for task in tasks:
        group = [c for c in cells if c["task"] == task]
        rows, target = task_rows(group)
        returns = {row["impl"]: row["return"] for row in rows}
        runs = {impl: [as_run(c) for c in group if c["impl"] == impl] for impl in ORDER}
        files = plot_experiment(f"{task} ({group[0]['env']})", {k: v for k, v in runs.items() if v}, plots, target)
        document["tasks"][task] = {
            "env": group[0]["env"], "peer_final_return": target, "rows": rows,
            "int8_test": int8_verdict(returns.get("actorq-fp32", []), returns.get("actorq-int8", [])),
            "regime": results_regime.task_regime(_probe(out_dir, task), group),
            "plots": [str(f.relative_to(out_dir)) for f in files],
        }
    write_text_atomically(out_dir / "results.json", json.dumps(document, indent=2))
    write_text_atomically(out_dir / "results.md", markdown(document))
    return document


def markdown(document: dict) -> str:
    """The table, one section per task, then the machines and commits the cells ran on."""
    lines = ["# Results against Stable-Baselines3", "",
             "Return at budget: mean ± the population standard deviation over seeds (np.std, as RL Zoo "
             "reports it; the sample std is 1.22x larger at 3 seeds).", ""]
    header = ["implementation", "seeds", "return at budget", "frames", "time to SB3's final return (s)",
              "wall-clock (s)", "updates/s", "frames/s"]
    for task, entry in document["tasks"].items():
        peer = fmt(entry["peer_final_return"], ".1f")
        lines += [f"## {task} ({entry['env']})", "",
                  f"SB3's mean final return: {peer}" + ("" if entry["peer_final_return"] is not None
                                                       else " (no SB3 peer for this algorithm)"), "",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for row in entry["rows"]:
            reach = "—" if row["time_to_peer_s"] is None else f"{row['time_to_peer_s']:.0f} ({row['reached_peer']})"
            lines.append("| " + " | ".join([
                row["impl"], ",".join(map(str, row["seeds"])), mean_std(row["return"]), f"{row['frames']:.0f}",
                reach, f"{row['wall_clock_s']:.0f}", fmt(row["updates_per_s"], ".0f"),
                f"{row['frames_per_s']:.0f}"]) + " |")
        lines += ["", f"int8 test (int8 mean >= lowest fp32 seed): {entry['int8_test']}", "",
                  results_regime.describe(entry.get("regime")), ""]
        lines += [f"![{Path(p).stem}]({p})" for p in entry["plots"]] + [""]
    lines += ["## Machines", ""]
    for item in document["machines"]:
        lines.append(f"- {item['cpu']} ({item['cores']} cores; {item['flags']}), commit {item['commit']}, load average at cell start "
                     f"{item['load_start']}, at end {item['load_end']} ({item['cells']} cells)")
    return "\n".join(lines) + "\n"


def _named_flags(flags: list[str]) -> str:
    """Which of the flags that set int8 and bf16 speed the CPU has.

    Example:
        >>> _named_flags(["avx2", "avx512_vnni", "amx_tile"])
        'avx2: yes, avx512_vnni: yes, avx512_bf16: no, amx: yes'
    """
    has = {"avx2": "avx2" in flags, "avx512_vnni": "avx512_vnni" in flags,
           "avx512_bf16": "avx512_bf16" in flags, "amx": any(flag.startswith("amx") for flag in flags)}
    return ", ".join(f"{name}: {'yes' if present else 'no'}" for name, present in has.items())


def _machines(cells: list[dict]) -> list[dict]:
    """One entry per (CPU, commit): the load averages (1 min) its cells started and ended at."""
    machines: dict[tuple, dict] = {}
    for cell in cells:
        info = cell["machine"]
        key = (info["cpu"], info["commit"])
        entry = machines.setdefault(key, {"cpu": info["cpu"], "cores": info["cores"], "commit": info["commit"],
                                          "flags": _named_flags(info["flags"]),
                                          "load_start": [], "load_end": [], "cells": 0})
        entry["load_start"].append(info["load_start"][0])
        entry["load_end"].append(info["load_end"][0])
        entry["cells"] += 1
    for entry in machines.values():
        for key in ("load_start", "load_end"):
            values = entry[key]
            entry[key] = f"{min(values):.2f}-{max(values):.2f}"
    return list(machines.values())


def _probe(out_dir: Path, task: str) -> dict | None:
    path = results_regime.probe_path(out_dir, task)
    return json.loads(path.read_text()) if path.is_file() else None


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None
