"""``actorq report DIR... [--out DIR]``: sweep dirs -> ``report.md`` + plots.

Compares the actors' precisions the way QuaRL's ActorQ figures do (eval return against
wall-clock seconds and against env frames, mean over seeds with a min-max band, one curve per
precision), with three tables per experiment that keep apart what they measure:

- *learning*: final returns and the env frames to a target return (a property of training,
  which one seed decides by chance as much as the precision does);
- *speed*: start-up, frames/s and learner updates/s, each against fp32 (rates of this
  machine, readable run by run);
- *time to target and energy*: wall-clock from the first collected frame to the target
  (learning and speed together), kWh and CO2 and how codecarbon got them.

Each DIR is a run dir (it holds the ``config.yaml`` that a run writes at its top) or any
folder above run dirs (a Hydra sweep dir). A run is read from its ``config.yaml``,
``summary.json`` and TensorBoard events (``tb/``). A run dir without ``summary.json`` (the
run crashed or was stopped), or whose summary has a ``"status"`` other than
``"completed"``, is listed as such and kept out of every mean. A Hydra folder without a
``config.yaml`` (``.hydra/`` and a log only: the log folder of a run saved with ``run_dir=``,
or a job that died before it started) is not a run; the report counts them in one line.

Example:
    >>> target_return(200.0, 0.9), target_return(-150.0, 0.9)
    (180.0, -165.0)
    >>> mean_std([1.0, 3.0])
    '2.0 ± 1.0'
    >>> regime_line([0.146])
    'Regime of these runs: learner-bound (the learner was busy 85% of the loop; actors 15%): even actors that cost nothing would shorten them at most 1.17x, so int8 actors cannot shorten this run much.'
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from actorq.util.arguments import as_options

MIN_SEEDS = 3  # fewer completed seeds than this per precision: a row is not a claim

DESCRIPTION = """\
Reads run dirs (each holds config.yaml, summary.json and tb/) under the given folders and
writes report.md and two plots per experiment: eval return against wall-clock and against
env frames, one curve per precision. The tables keep learning (frames to target) apart from
speed (frames/s, updates/s) and give time to target, energy and CO2 with how they were
measured; fewer than 3 seeds per precision is marked as no claim."""

EXAMPLES = """\
examples:
  actorq report multirun/2026-11-22/10-00-00
  actorq report SWEEP_A SWEEP_B out=report/
  actorq report SWEEP target_return=-200      (--target-return -200 is the same)

docs/reproducing.md explains every column."""


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
    push_bytes: float | None = None
    pushes: float | None = None
    started_at: float | None = None  # the first TensorBoard event's wall time (the logger opening)
    startup_s: float | None = None  # from then to the first batch of frames the learner received
    frames_per_s: float | None = None  # after start-up: first to last collect/frames event

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def group(self) -> str:
        return f"{self.algo} on {self.env}"


# --- reading runs ---------------------------------------------------------------------


def find_run_dirs(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """``(run dirs, Hydra folders that are not runs)`` under each path. A run dir holds the
    ``config.yaml`` a run writes at its top; a folder with Hydra's ``.hydra/`` and no
    ``config.yaml`` is the log folder of a run saved elsewhere (``run_dir=``) or a job that
    died before it wrote its config: never a run."""
    found: set[Path] = set()
    hydra_only: set[Path] = set()
    for path in paths:
        if not path.is_dir():
            raise FileNotFoundError(f"no such directory: {path}")
        for config in [path / "config.yaml", *path.rglob("config.yaml")]:
            if not config.is_file():
                continue
            folder = config.parent
            hydra = folder.name == ".hydra"
            top = folder.parent if hydra else folder
            inside = top.relative_to(path).parts if top != path and path in top.parents else ()
            if ".hydra" in inside or "tb" in inside:
                continue
            if not hydra:
                found.add(folder)
            elif not (top / "config.yaml").is_file():
                hydra_only.add(top)
    return sorted(found), sorted(hydra_only - found)


def read_run(run_dir: Path) -> Run:
    config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
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
        status=status, experiment=experiment_of(run_dir, config), summary=summary,
    )
    read_events(run)
    return run


def precision_of(config: dict) -> str:
    """The precision a run without a summary was configured for, named as the summary
    would name it (``QuantSpec.describe``), or ``bits=N`` when that cannot be built."""
    node = config.get("quant") or {}
    try:
        from hydra.utils import instantiate

        return instantiate({**node, "max_kl": None}).describe()  # the budget (maybe auto) names nothing
    except Exception:  # noqa: BLE001 - a crashed run's config may not even build
        return f"bits={node.get('bits', '?')}"


def experiment_of(run_dir: Path, config: dict) -> str | None:
    """The experiment's name: the run's ``config.yaml`` (``experiment: NAME``, where the run
    records it), else the ``+experiment=NAME`` override of a Hydra job in the run dir."""
    from actorq.run.resume import started_experiment

    if isinstance(config.get("experiment"), str):
        return config["experiment"]
    return started_experiment(run_dir)


def read_events(run: Run) -> None:
    """Eval returns against seconds since the first collected frame (the first
    ``collect/frames`` event; the quantized policy's evaluations left out) and against frames; the start-up before that frame (from the
    first TensorBoard event, the logger opening as the fit starts); the frame rate after it;
    the push payload size and count."""
    tb = run.path / "tb"
    if not tb.is_dir():
        return
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tb), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    try:
        run.started_at = origin = events.FirstEventTimestamp()
    except ValueError:
        return
    uncounted = quant_evaluation_seconds(events, tags)  # (wall time, step, seconds so far)
    pauses = sitting_pauses(tb)
    if "collect/frames" in tags:
        frames = events.Scalars("collect/frames")
        origin = frames[0].wall_time
        run.startup_s = origin - run.started_at
        seconds = running_seconds(frames[-1].wall_time, origin, pauses) \
            - max((v for t, _, v in uncounted if t <= frames[-1].wall_time), default=0.0)
        if len(frames) > 1 and seconds > 0:
            run.frames_per_s = (frames[-1].value - frames[0].value) / seconds
    if "eval/return_mean" in tags:
        run.evals = [(max(0.0, running_seconds(e.wall_time, origin, pauses)
                          - max((v for _, step, v in uncounted if step <= e.step), default=0.0)),
                      float(e.step), e.value) for e in events.Scalars("eval/return_mean")]
    for tag in ("quant/push_bytes", "quant/broadcast_bytes"):  # the latter: runs from before the rename
        if tag in tags:
            run.push_bytes = events.Scalars(tag)[-1].value
            break
    for tag in ("quant/pushes", "quant/broadcasts"):
        if tag in tags:
            run.pushes = max(e.value for e in events.Scalars(tag))
            break


def sitting_pauses(tb: Path) -> list[tuple[float, float]]:
    """``(end, start)`` wall times of the pauses between a run's sittings: each sitting
    (``actorq train``, then each ``actorq resume``) writes its own event file, and the time
    from one file's last scalar to the next file's first is not the run's."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    paths = list(tb.glob("events.out.tfevents.*"))
    if len(paths) < 2:
        return []
    spans = []
    for path in paths:
        times = [event.wall_time for event in EventFileLoader(str(path)).Load() if event.HasField("summary")]
        if times:
            spans.append((min(times), max(times)))
    spans.sort()
    return [(before[1], after[0]) for before, after in zip(spans, spans[1:]) if after[0] > before[1]]


def running_seconds(wall_time: float, origin: float, pauses: list[tuple[float, float]]) -> float:
    """Seconds from ``origin`` to ``wall_time`` less the pauses between sittings that end by then."""
    return wall_time - origin - sum(start - end for end, start in pauses if start <= wall_time)


def quant_evaluation_seconds(events, tags: set[str]) -> list[tuple[float, int, float]]:
    """``(wall time, step, seconds so far)`` of each ``time/eval_quant_s`` event: the time spent
    evaluating the actors' quantized policy (none in fp32 runs), which a run's clock leaves
    out: an fp32 run evaluates one policy, an int8 run two, and only the first is part of
    training. An evaluation's own episodes are matched by step (its scalars are written one
    after the other at one step); the frame rate's interval by wall time."""
    if "time/eval_quant_s" not in tags:
        return []
    return [(e.wall_time, e.step, e.value) for e in events.Scalars("time/eval_quant_s")]


# --- numbers --------------------------------------------------------------------------


def target_return(fp32_final_mean: float, fraction: float) -> float:
    """Within ``1 - fraction`` of the fp32 final mean's magnitude: ``0.9 * 200 = 180``;
    for negative returns (Pendulum) ``-150 - 0.1 * 150 = -165``."""
    return fp32_final_mean - (1.0 - fraction) * abs(fp32_final_mean)


def time_to_target(run: Run, target: float) -> tuple[float, float] | None:
    """(seconds since the first collected frame, frames) of the run's first evaluation at or
    above ``target``."""
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


def ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


@functools.cache
def fp32_name() -> str:
    """What summaries call fp32 actors (the full-precision codec's description): the baseline."""
    from actorq.quant import QuantSpec
    from actorq.quant.codecs import full_precision

    codec = full_precision()
    return codec.describe(QuantSpec(bits=max(codec.bits)))


def precision_order(name: str) -> tuple[int, str]:
    return (0 if name == fp32_name() else 1, name)


def seeds_cell(runs: list[Run]) -> str:
    """``3 of 3 completed``; with fewer than :data:`MIN_SEEDS` completed, says it is no claim.

    >>> seeds_cell([])
    '0 of 0 completed; n=0: not a claim'
    """
    ok = [r for r in runs if r.completed]
    lost = len(runs) - len(ok)
    cell = f"{len(ok)} of {len(runs)} completed" + (f" ({lost} missing/crashed)" if lost else "")
    return cell + (f"; n={len(ok)}: not a claim" if len(ok) < MIN_SEEDS else "")


# --- energy ---------------------------------------------------------------------------

# codecarbon's ways of getting a device's power (carbon.py's "method" per device): a power
# counter read from the hardware, a model of it, or a constant.
_COUNTERS = ("intel_rapl", "intel_power_gadget", "windows_emi", "powermetrics")


def device_method(device: str, method: str) -> tuple[str, str]:
    """``(kind, words)`` of codecarbon's method for one device; kind is ``counter``,
    ``model`` or ``constant``.

    >>> device_method("cpu", "cpu_load"), device_method("ram", "estimate from installed RAM size")
    (('model', 'cpu: TDP x load'), ('constant', 'ram: flat, from its size'))
    >>> device_method("cpu", "intel_rapl")
    ('counter', 'cpu: intel_rapl counter')
    """
    text = str(method).lower()
    if device == "ram":
        return "constant", f"ram: {'forced ' + text.split()[1] + ' W' if text.startswith('forced') else 'flat, from its size'}"
    if text == "constant":
        return "constant", f"{device}: TDP constant"
    if text == "cpu_load":
        return "model", f"{device}: TDP x load"
    if device == "gpu" or any(counter in text for counter in _COUNTERS):
        return "counter", f"{device}: {text} counter" if device != "gpu" else "gpu: NVML counter"
    return "model", f"{device}: {text}"


def energy_method(energy: dict, share: bool = True) -> tuple[str, bool]:
    """``(words, estimate)`` for one run's ``energy`` object: each device's method, the share
    of the kWh that is a constant (RAM's flat figure, a TDP constant), and whether no device's
    power came from a counter (the whole figure is then an estimate)."""
    if energy.get("kwh") is None:
        return f"not measured: {energy.get('reason', 'no reason recorded')}", False
    methods = energy.get("method") or {}
    if not methods:
        return "method not recorded", True
    kinds = {device: device_method(device, method) for device, method in methods.items()}
    constant_kwh = [energy.get(f"{device}_kwh") for device, (kind, _) in kinds.items() if kind == "constant"]
    words = "; ".join(text for _, text in kinds.values())
    if share and constant_kwh and energy["kwh"] and all(v is not None for v in constant_kwh):
        words += f"; {sum(constant_kwh) / energy['kwh']:.0%} of the kWh a constant"
    estimate = not any(kind == "counter" for kind, _ in kinds.values())
    return (("estimate, no power counter: " if estimate else "measured: ") + words), estimate


# --- the report -----------------------------------------------------------------------


def group_runs(runs: list[Run]) -> dict[str, dict[str, list[Run]]]:
    groups: dict[str, dict[str, list[Run]]] = {}
    for run in runs:
        groups.setdefault(run.group, {}).setdefault(run.precision, []).append(run)
    return {g: dict(sorted(p.items(), key=lambda kv: precision_order(kv[0]))) for g, p in sorted(groups.items())}


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def choose_target(precisions: dict[str, list[Run]], target_override: float | None,
                  fraction: float) -> tuple[float | None, str]:
    fp32_finals = [r.summary["final_return"] for r in precisions.get(fp32_name(), [])
                   if r.completed and r.summary.get("final_return") is not None]
    if target_override is not None:
        return target_override, "--target-return"
    if fp32_finals:
        return (target_return(statistics.fmean(fp32_finals), fraction),
                f"fp32 final mean less {1 - fraction:.0%} of its magnitude")
    return None, "no completed fp32 run to take it from; pass --target-return"


def experiment_tables(precisions: dict[str, list[Run]], target: float | None) -> list[str]:
    """The three tables of one experiment: learning, speed, time to target and energy."""
    done = {p: [r for r in runs if r.completed] for p, runs in precisions.items()}
    reached = {p: [time_to_target(r, target) for r in ok] if target is not None else [] for p, ok in done.items()}

    def all_reached(p: str) -> list[tuple[float, float]] | None:
        hits = reached[p]
        return hits if hits and all(h is not None for h in hits) else None

    def reached_cell(p: str, index: int, digits: int) -> str:
        hits = [h for h in reached[p] if h is not None]
        if target is None or not done[p]:
            return "—"
        note = "" if len(hits) == len(done[p]) else f" ({len(hits)} of {len(done[p])} reached)"
        return (mean_std([h[index] for h in hits], digits) + note) if hits else f"not reached{note}"

    def mean_of(p: str, value) -> float | None:
        return mean_or_none([value(r) for r in done[p]])

    learning, speed, cost = [], [], []
    fp32 = fp32_name()
    base_fps = mean_of(fp32, lambda r: r.frames_per_s) if fp32 in done else None
    base_ups = mean_of(fp32, lambda r: r.summary.get("learner_updates_per_s")) if fp32 in done else None
    base_time = statistics.fmean(s for s, _ in all_reached(fp32)) if fp32 in done and all_reached(fp32) else None
    base_co2 = mean_of(fp32, lambda r: r.summary.get("energy", {}).get("co2_kg")) if fp32 in done else None
    for precision, runs in precisions.items():
        ok = done[precision]
        seeds = seeds_cell(runs)
        finals = [r.summary["final_return"] for r in ok if r.summary.get("final_return") is not None]
        quant = [r.summary["final_return_quant"] for r in ok if r.summary.get("final_return_quant") is not None]
        learning.append([precision, seeds, mean_std(finals), mean_std(quant) if quant else "—",
                         reached_cell(precision, 1, 0)])

        fps = mean_of(precision, lambda r: r.frames_per_s)
        ups = mean_of(precision, lambda r: r.summary.get("learner_updates_per_s"))
        per_push = mean_or_none([r.push_bytes for r in ok])
        pushes = mean_or_none([r.pushes for r in ok])
        speed.append([
            precision, str(len(ok)), fmt(mean_of(precision, lambda r: r.startup_s), ".1f"), fmt(fps, ".0f"),
            fmt(ratio(fps, base_fps), ".2f", "x"), fmt(ups, ".0f"), fmt(ratio(ups, base_ups), ".2f", "x"),
            fmt(mean_of(precision, lambda r: r.summary.get("collect_fraction")), ".2f"),
            f"{fmt(per_push, '.0f')} x {fmt(pushes, '.0f')}" if per_push is not None else "—",
            " / ".join(dict.fromkeys(learner_precision(r.summary) for r in ok)) or "—",
        ])

        hits = all_reached(precision)
        mine = statistics.fmean(s for s, _ in hits) if hits else None
        co2 = mean_of(precision, lambda r: r.summary.get("energy", {}).get("co2_kg"))
        kwh = mean_of(precision, lambda r: r.summary.get("energy", {}).get("kwh"))
        methods = [energy_method(r.summary["energy"]) for r in ok if r.summary.get("energy")]
        estimate = any(flag for _, flag in methods)
        method_cell = " / ".join(dict.fromkeys(text for text, _ in methods)) or "—"
        cost.append([precision, seeds, reached_cell(precision, 0, 1), fmt(ratio(base_time, mine), ".2f", "x"),
                     fmt(kwh, ".3g") + (" (estimate)" if estimate and kwh is not None else ""),
                     fmt(co2, ".3g"), fmt(ratio(base_co2, co2), ".2f", "x"), method_cell])
    return [
        "**Learning** (how much experience the target took; between fewer than 3 seeds a "
        "difference here is chance as much as precision):", "",
        *table(["precision", "seeds", "final return", "int8 policy's own return", "frames to target"], learning),
        "", "**Speed** (rates of this machine; start-up: from the logger opening to the first batch of frames; "
        "frames/s after start-up):", "",
        *table(["precision", "runs", "start-up (s)", "frames/s", "frames/s vs fp32", "learner updates/s",
                "updates/s vs fp32", "collect fraction", "push bytes (per push x pushes)", "learner precision"],
               speed),
        "", "**Time to target and energy** (learning and speed together; time from the first collected frame):",
        "", *table(["precision", "seeds", "time to target (s)", "speedup vs fp32", "kWh", "kg CO2",
                    "carbon reduction vs fp32", "energy method"], cost),
        "",
    ]


def learner_precision(summary: dict) -> str:
    """The precision the learner ran at, and whether ``trainer.precision=auto`` chose it.

    >>> learner_precision({"learner_precision": {"precision": "bf16-mixed", "choice": "auto"}})
    'bf16-mixed (auto)'
    >>> learner_precision({})  # a summary written before the learner's precision was recorded
    '?'
    """
    ran = summary.get("learner_precision") or {}
    if not ran.get("precision"):
        return "?"
    return ran["precision"] + (" (auto)" if ran.get("choice") == "auto" else "")


def regime_line(collect_fractions: list[float], runs: str = "these runs") -> str:
    """Which resource bounded the runs, from their ``collect_fraction`` (the share of the
    training loop spent waiting for the actors), and what faster actors can change: at most
    ``1 / (1 - collect_fraction)`` (the waiting gone, the learning left)."""
    if not collect_fractions:
        return f"Regime of {runs}: unknown (no collect_fraction in the summaries)."
    waiting = statistics.fmean(collect_fractions)
    bound = f"at most {1 / (1 - waiting):.2f}x" if waiting < 0.99 else "by more than 100x"
    busy = f"the learner was busy {1 - waiting:.0%} of the loop; actors {waiting:.0%}"
    if waiting < 0.5:
        return (f"Regime of {runs}: learner-bound ({busy}): even actors that cost nothing would shorten "
                f"them {bound}, so int8 actors cannot shorten this run much.")
    return (f"Regime of {runs}: actor-bound ({busy}): faster actors shorten them, {bound} if collection "
            "cost nothing; int8 actors can pay here.")


def claims_line(precisions: dict[str, list[Run]]) -> str:
    """What the tables of one experiment can and cannot show."""
    least = min(sum(r.completed for r in runs) for runs in precisions.values())
    if least < MIN_SEEDS:
        return (f"What these tables can show: the speed table's rates, run by run, on this machine. What they "
                f"cannot: with n={least} seed{'s' if least != 1 else ''} for a precision, a difference in "
                "return, frames to target or time to target is one draw of training noise, not an effect of "
                f"the precision (run at least {MIN_SEEDS} seeds per precision for that). Time to target is a "
                "speedup only where frames to target match.")
    return ("What these tables can show: mean ± std over seeds; a difference smaller than the std is not a "
            "difference. Time to target is a speedup only where frames to target match; the speed table "
            "says whether the precision changed the rates.")


def order_note(precisions: dict[str, list[Run]]) -> list[str]:
    """A note when one precision ran before the other for every seed they share: a drift of
    the machine's speed over the sweep (other jobs, heat, caches) would read as a precision
    effect."""
    starts = {p: {r.seed: r.started_at for r in runs if r.completed and r.started_at is not None}
              for p, runs in precisions.items()}
    notes, fp32 = [], fp32_name()
    for precision in [p for p in starts if p != fp32]:
        shared = sorted(set(starts.get(fp32, {})) & set(starts[precision]), key=str)
        if not shared:
            continue
        fp32_first = [starts[fp32][s] < starts[precision][s] for s in shared]
        if all(fp32_first) or not any(fp32_first):
            first, then = (fp32, precision) if all(fp32_first) else (precision, fp32)
            notes.append(f"Run order: {first} ran before {then} for every seed ({len(shared)}); a drift of the "
                         "machine's speed during the sweep would read as a precision effect. Alternate which "
                         "precision runs first from seed to seed (one sweep per seed: docs/reproducing.md).")
    return [*notes, ""] if notes else []


def plot_experiment(name: str, precisions: dict[str, list[Run]], out: Path, target: float | None,
                    axes: tuple[str, ...] = ("time", "frames")) -> list[Path]:
    """A PNG per axis in ``axes``: eval return vs wall-clock seconds (from the first collected
    frame, ``"time"``) and vs env frames (``"frames"``), mean and min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    files = []
    slug = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").lower()
    for axis, index, label in (("time", 0, "wall-clock from the first collected frame (s)"),
                               ("frames", 1, "env frames")):
        if axis not in axes:
            continue
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
            method, _ = energy_method(energy, share=False)
            where = (energy.get("country_iso_code") or "?") + (f"/{energy['region']}" if energy.get("region") else "")
            line = (f"{energy.get('tool', 'codecarbon')} {energy.get('codecarbon_version', '')}, "
                    f"{energy.get('tracking_mode')} tracking; {method}; carbon intensity of {where}")
        notes[line] = notes.get(line, 0) + 1
    return [f"- {line} ({n} run{'s' if n > 1 else ''})" for line, n in notes.items()]


def write_report(paths: list[Path], out: Path, target_override: float | None = None,
                 target_fraction: float = 0.9) -> Path:
    """Reads every run under ``paths`` and writes ``out/report.md`` and its PNGs."""
    run_dirs, not_runs = find_run_dirs(paths)
    runs = [read_run(d) for d in run_dirs]
    if not runs:
        raise FileNotFoundError(f"no run dirs (config.yaml) under {', '.join(map(str, paths))}")
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# actorq precision comparison", "",
             f"{len(runs)} runs from {', '.join(f'`{p}`' for p in paths)}; "
             f"{sum(r.completed for r in runs)} completed.", "",
             "Final return: the fp32 learner policy's last greedy evaluation (mean ± std over completed seeds); "
             "int8 policy's own return: the actors' quantized policy run greedily. Frames to target and time to "
             "target: the first evaluation at or above the target return; the time counts from the run's first "
             "collected frame (the start-up before it is a column of its own), less a resumed run's pauses "
             "between sittings. kWh and CO2 cover the whole "
             "machine during the fit (codecarbon); *estimate* marks figures where no device's power was read "
             "from a counter. A missing or crashed seed is counted in *seeds* and listed below, never averaged "
             "in; a column whose seeds are not all measured shows —.", ""]
    if not_runs:
        lines += [f"Not runs, not counted: {len(not_runs)} Hydra folder{'s' if len(not_runs) > 1 else ''} "
                  "without a config.yaml (the log folder of a run saved with run_dir=, or a job that died "
                  "before it started).", ""]
    for name, precisions in group_runs(runs).items():
        experiments = sorted({r.experiment for rs in precisions.values() for r in rs if r.experiment})
        target, how = choose_target(precisions, target_override, target_fraction)
        fp32_runs = precisions.get(fp32_name())
        regime_runs = fp32_runs or [r for rs in precisions.values() for r in rs]
        fractions = [r.summary["collect_fraction"] for r in regime_runs
                     if r.completed and r.summary.get("collect_fraction") is not None]
        lines += [f"## {name}" + (f" ({', '.join(experiments)})" if experiments else ""), "",
                  f"Target return: {fmt(target, '.1f')} ({how}).", "",
                  regime_line(fractions, "the fp32 runs" if fp32_runs else "these runs"), "",
                  claims_line(precisions), "",
                  *experiment_tables(precisions, target), *order_note(precisions), *duplicate_seeds(precisions)]
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="actorq report", description=DESCRIPTION, epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="sweep dirs or run dirs")
    parser.add_argument("--out", type=Path, help="where report.md and the PNGs go (default: the first DIR)")
    parser.add_argument("--target-return", type=float, help="the return whose time to reach is compared")
    parser.add_argument("--target-fraction", type=float, default=0.9,
                        help="without --target-return: the target is this fraction of the fp32 final mean")
    args = parser.parse_args(as_options(argv, parser))
    if not 0 < args.target_fraction <= 1:
        parser.error(f"--target-fraction must be in (0, 1], got {args.target_fraction}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
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
