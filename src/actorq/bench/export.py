"""``actorq bench export``: an exported policy's forward time and file size, ``.pt2``
(``torch.export``) against TorchScript, fp32 against int8.

For each policy (Nature-CNN on a batch of 8 frames, static int8 as the Atari experiments run it;
the MLP ``17 -> 2048 x 3 -> 6`` on a batch of 16, dynamic int8 as the default recipe), the
policy is exported in both formats at both precisions, loaded back as a user loads it
(``torch.export.load(...).module()``, ``torch.jit.load``) and timed on one thread, best of
interleaved rounds of medians. A ``.pt2`` of an int8 copy computes its codes in fp32
(:mod:`actorq.quant.reference`); TorchScript keeps the int8 kernels.

Usage (``tests/unit/test_export_program.py`` runs the quick form)::

    actorq bench export [--quick] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from actorq.algos.ppo import PPO
from actorq.bench._table import report
from actorq.bench.inference import best_medians, policy_of_width
from actorq.envs import EnvSpec
from actorq.quant import QuantizedNetwork, QuantSpec
from actorq.tools.standalone import export
from actorq.util.arguments import as_options

FRAMES = EnvSpec(obs_dim=4 * 84 * 84, discrete=True, num_actions=4, frame_shape=(4, 84, 84))
FORMATS = {"TorchScript": ".pt", "pt2": ".pt2"}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="actorq bench export", description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200, help="timed forwards per file")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (each keeps its best)")
    parser.add_argument("--quick", action="store_true", help="a 256-wide MLP only, few iterations (smoke test)")
    parser.add_argument("--out", default="bench-results/export.json", help="JSON output ('' for none)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(as_options(argv, parser))
    if args.quick:
        args.iterations, args.rounds = min(args.iterations, 20), min(args.rounds, 2)
    return args


def policies(quick: bool) -> dict[str, tuple[nn.Module, torch.Tensor, str]]:
    """name -> (fp32 policy, the batch it is timed on, its int8 mode)."""
    if quick:
        return {"MLP 17-256x3-6, batch 16": (policy_of_width(256), torch.randn(16, 17), "dynamic")}
    frames = torch.randint(0, 256, (8, *FRAMES.frame_shape), dtype=torch.uint8)
    return {
        "Nature-CNN, batch 8": (PPO(FRAMES, pixel_trunk="nature").policy.eval(), frames, "static"),
        "MLP 17-2048x3-6, batch 16": (policy_of_width(2048), torch.randn(16, 17), "dynamic"),
    }


def measure(name: str, policy: nn.Module, batch: torch.Tensor, mode: str, folder: Path,
            args: argparse.Namespace) -> list[dict]:
    """One row per precision: µs per forward and bytes of each format, and their ratios."""
    calibration = batch.repeat(64, *[1] * (batch.dim() - 1))
    loaded, sizes = {}, {}
    for bits in (32, 8):
        network = QuantizedNetwork.from_network(policy, QuantSpec(bits=bits, mode=mode), calibration)
        for fmt, suffix in FORMATS.items():
            path = export(network, folder / f"{bits}{suffix}")
            loaded[bits, fmt] = torch.export.load(str(path)).module() if suffix == ".pt2" else torch.jit.load(str(path))
            sizes[bits, fmt] = path.stat().st_size
    us = best_medians({f"{bits} {fmt}": module for (bits, fmt), module in loaded.items()}, batch, args.iterations,
                      args.rounds)
    rows = []
    for bits in (32, 8):
        row = {"policy": name, "precision": "fp32" if bits == 32 else f"int8 {mode}"}
        row.update({f"{fmt}_us": us[f"{bits} {fmt}"] for fmt in FORMATS})
        row.update({f"{fmt}_MB": sizes[bits, fmt] / 1e6 for fmt in FORMATS})
        row["pt2_over_TorchScript"] = us[f"{bits} pt2"] / us[f"{bits} TorchScript"]
        row["pt2_over_fp32_pt2"] = us[f"{bits} pt2"] / us["32 pt2"]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    """Runs the benchmark, prints the table, writes JSON; returns the rows."""
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as folder, torch.no_grad():
        for name, (policy, batch, mode) in policies(args.quick).items():
            rows.extend(measure(name, policy, batch, mode, Path(folder), args))
    report("export: µs per forward on 1 thread and file size, .pt2 (torch.export) vs TorchScript", rows,
           args.out or None)
    return rows


if __name__ == "__main__":
    main()
