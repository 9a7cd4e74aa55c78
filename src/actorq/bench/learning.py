"""``actorq bench learning``: the reference learning runs, fp32 vs int8 actors.

Runs each reference experiment with ``quant.bits=32`` and ``quant.bits=8`` (same seed,
one after the other in this process) and prints final eval return (of the learner's fp32
policy and of the int8 policy the actors ran), frames and wall-clock side by side.

Usage (``tests/integration/test_bench_smoke.py`` runs the quick form)::

    actorq bench learning [--quick] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_module

from actorq.bench._table import report
from actorq.train import train
from actorq.util.arguments import as_options

REFERENCE = ("dqn_cartpole", "td3_pendulum", "sac_pendulum", "d4pg_cartpole")
# The CPU-sized variant of the reference D4PG run (QuaRL's 2048x3 actor takes hours here).
EXPERIMENT_OVERRIDES = {"d4pg_cartpole": ("algo.actor_hidden=[64,64]", "algo.critic_hidden=[128,128]")}
QUICK_OVERRIDES = (
    "actors.total_frames=1000", "actors.frames_per_batch=100", "actors.init_random_frames=200",
    "algo.learning_starts=200", "algo.batch_size=32", "eval.every_frames=1000", "eval.episodes=1",
)


def run(experiment: str, bits: int, seed: int, run_dir: Path, extra: Sequence[str]) -> dict:
    overrides = [f"+experiment={experiment}", f"quant.bits={bits}", f"seed={seed}", f"run_dir={run_dir}",
                 "callbacks=no_checkpoint", *EXPERIMENT_OVERRIDES.get(experiment, ()), *extra]
    with initialize_config_module("actorq.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    summary, _ = train(cfg)
    return summary


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="actorq bench learning", description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="+", default=list(REFERENCE))
    parser.add_argument("--bits", type=int, nargs="+", default=[32, 8])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--quick", action="store_true", help="tiny budgets (smoke test, no learning)")
    parser.add_argument("--runs-dir", default=None, help="where the runs go (default: a temporary folder)")
    parser.add_argument("--out", default="bench-results/learning.json", help="JSON output ('' for none)")
    return parser.parse_args(as_options(argv, parser))


def actors_return(summary: dict) -> float:
    """The actors' policy's final return: the quantized one's, or for fp32 actors (no
    quantized evaluation) the fp32 one.

    Example:
        >>> actors_return({"final_return": 200.0, "final_return_quant": 180.0})
        180.0
        >>> actors_return({"final_return": 200.0, "final_return_quant": None})
        200.0
    """
    quant = summary["final_return_quant"]
    return summary["final_return"] if quant is None else quant


def main(argv: Sequence[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    extra = QUICK_OVERRIDES if args.quick else ()
    runs_dir = Path(args.runs_dir or tempfile.mkdtemp(prefix="actorq-learning-"))
    rows = []
    for experiment in args.experiments:
        for seed in args.seeds:
            for bits in args.bits:
                summary = run(experiment, bits, seed, runs_dir / f"{experiment}-bits{bits}-seed{seed}", extra)
                rows.append({
                    "experiment": experiment, "seed": seed, "actors": summary["actor_precision"],
                    "final_return": summary["final_return"],
                    "final_return_actors": actors_return(summary),
                    "best_return": summary["best_return"], "frames": summary["frames"],
                    "wall_clock_s": summary["wall_clock_s"], "collect_fraction": summary["collect_fraction"],
                })
    report("reference learning runs: fp32 vs int8 actors", rows, args.out or None)
    print(f"runs: {runs_dir}")
    return rows


if __name__ == "__main__":
    main()
