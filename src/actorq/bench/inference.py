"""``actorq bench inference``: microseconds per actor forward at each precision.

One thread (as in each actor process), policies ``17 -> W -> W -> W -> 6`` with a tanh head,
fp32 vs bf16 vs int8 static (first and last layer in fp32) vs int8 static with every layer in
int8 (``quant.format=int8_static``) vs int8 dynamic (the default recipe: first and last layer in
fp32) vs int8 dynamic with every layer in int8 (``quant.format=int8_dynamic``), and what
``quant.bits=auto`` picks for that width and batch (measured again here next to the others).
Ratios are speedups over fp32.

Usage (``tests/unit/test_quant_auto.py`` runs the quick form)::

    actorq bench inference [--quick] [--out FILE.json]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch
from torch import nn

from actorq.bench._table import report
from actorq.envs import EnvSpec
from actorq.algos.networks import DeterministicActor
from actorq.quant import QuantizedNetwork, QuantSpec, select_precision, time_forward
from actorq.util.arguments import as_options

OBS_DIM, ACTION_DIM, DEPTH = 17, 6, 3
WIDTHS, BATCHES = (256, 1024, 2048), (1, 16, 256)
QUICK_WIDTHS, QUICK_BATCHES = (64, 256), (1, 16)
CANDIDATES = {
    "bf16": QuantSpec(bits=16),
    "static": QuantSpec(bits=8, mode="static"),  # the output layer in fp32 (the default recipe)
    "static_all_int8": QuantSpec(bits=8, mode="static", format="int8_static"),  # the output layer in int8 too
    "dynamic": QuantSpec(bits=8, mode="dynamic"),  # the output layer in fp32 (the default int8 recipe)
    "dynamic_all_int8": QuantSpec(bits=8, mode="dynamic", format="int8_dynamic"),
}
TARGET_INT8_AT_2048 = 5.0
TARGET_AUTO = 0.95


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="actorq bench inference", description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=None, help=f"hidden widths (default {WIDTHS})")
    parser.add_argument("--batches", type=int, nargs="+", default=None, help=f"batch sizes (default {BATCHES})")
    parser.add_argument("--iterations", type=int, default=200, help="timed forwards per precision and cell")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (each keeps its best)")
    parser.add_argument("--quick", action="store_true", help="small widths and few iterations (smoke test)")
    parser.add_argument("--out", default="bench-results/inference.json", help="JSON output ('' for none)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(as_options(argv, parser))
    if args.quick:
        args.widths = args.widths or list(QUICK_WIDTHS)
        args.batches = args.batches or list(QUICK_BATCHES)
        args.iterations = min(args.iterations, 40)
    args.widths = args.widths or list(WIDTHS)
    args.batches = args.batches or list(BATCHES)
    return args


def policy_of_width(width: int) -> DeterministicActor:
    spec = EnvSpec(
        obs_dim=OBS_DIM, discrete=False, action_dim=ACTION_DIM,
        action_low=(-1.0,) * ACTION_DIM, action_high=(1.0,) * ACTION_DIM,
    )
    return DeterministicActor(spec, (width,) * DEPTH).eval()


def best_medians(
    networks: dict[str, nn.Module], batch: torch.Tensor, iterations: int, rounds: int
) -> dict[str, float]:
    """Median µs per forward of each network, best of ``rounds`` interleaved rounds."""
    best = {name: float("inf") for name in networks}
    for _ in range(rounds):
        for name, network in networks.items():
            timing = time_forward(network, batch, iterations=max(iterations // rounds, 5), budget_s=1.0)
            best[name] = min(best[name], timing.median_us)
    return best


def measure_cell(
    actor: nn.Module, calibration: torch.Tensor, batch_size: int, args: argparse.Namespace
) -> dict:
    """One (width, batch) row: timings, the auto pick, and speedups over fp32."""
    auto = select_precision(
        actor, QuantSpec(bits="auto"), batch_size,
        observations=calibration, iterations=max(args.iterations // 2, 15),
    )
    networks: dict[str, nn.Module] = {"fp32": actor}
    for name, spec in CANDIDATES.items():
        networks[name] = QuantizedNetwork.from_network(actor, spec, calibration)
    networks["auto"] = QuantizedNetwork.from_network(actor, auto.spec, calibration)
    batch = calibration[:batch_size]
    us = best_medians(networks, batch, args.iterations, args.rounds)
    row = {"width": actor.trunk[0].out_features, "batch": batch_size, "auto_pick": auto.name}
    row.update({f"{name}_us": us[name] for name in networks})
    row.update({f"{name}_x": us["fp32"] / us[name] for name in networks if name != "fp32"})
    return row


def check_targets(rows: list[dict]) -> list[str]:
    """One line per target: int8 >= 5x fp32 at width 2048 batch 1; auto >= 0.95x everywhere."""
    lines = []
    for row in rows:
        if row["width"] == 2048 and row["batch"] == 1:
            best = max(row["static_x"], row["dynamic_x"])
            verdict = "ok" if best >= TARGET_INT8_AT_2048 else "MISSED"
            lines.append(
                f"int8 at width 2048 batch 1: {best:.1f}x fp32 "
                f"(target >= {TARGET_INT8_AT_2048}x) {verdict}"
            )
    worst = min(rows, key=lambda row: row["auto_x"])
    verdict = "ok" if worst["auto_x"] >= TARGET_AUTO else "MISSED"
    lines.append(
        f"auto, slowest cell (width {worst['width']}, batch {worst['batch']}): {worst['auto_x']:.2f}x fp32 "
        f"(target >= {TARGET_AUTO}x) {verdict}"
    )
    return lines


def main(argv: list[str] | None = None) -> list[dict]:
    """Runs the benchmark, prints the table and the targets, writes JSON; returns the rows."""
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    rows = []
    with torch.no_grad():
        for width in args.widths:
            actor = policy_of_width(width)
            calibration = torch.randn(max(512, *args.batches), OBS_DIM)
            rows.extend(measure_cell(actor, calibration, batch, args) for batch in args.batches)
    report("inference: µs per forward, 1 thread; *_x = speedup over fp32", rows, args.out or None)
    for line in check_targets(rows):
        print(line)
    return rows


if __name__ == "__main__":
    main()
