"""``python -m actorq.bench actors``: env frames/s of real actor processes, fp32 vs int8.

The actors are the real thing: TorchRL collector worker processes stepping dm_control
cheetah-run with the d4pg_cheetah-sized policy (17 -> 2048 -> 2048 -> 2048 -> 6, as in the
QuaRL code), each worker on one thread. The main process only drains batches, so the rate
is what the actors can supply. fp32 and int8 runs alternate in one process; each keeps its
best round.

Usage (``tests/unit/test_bench_smoke.py`` runs the quick form)::

    python -m actorq.bench actors [--quick] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import torch

from actorq.actors.policy import ExplorationPolicy
from actorq.actors.pool import ActorPool
from actorq.bench._table import report
from actorq.envs import EnvSpec, make_env, random_observations
from actorq.networks import DeterministicActor
from actorq.quant import QuantizedNetwork, QuantSpec

TARGET_RATIO = 3.0
PRECISIONS = {
    "fp32": None,
    "int8 static": QuantSpec(bits=8, mode="static"),
    "int8 dynamic": QuantSpec(bits=8, mode="dynamic"),
}


def actor_policy(env_name: str, width: int, quant: QuantSpec | None, seed: int = 0) -> ExplorationPolicy:
    env = make_env(env_name, seed=seed)
    spec = EnvSpec.from_env(env)
    torch.manual_seed(seed)
    network = DeterministicActor(spec, (width,) * 3)
    if quant is not None:
        network = QuantizedNetwork.from_network(network, quant, random_observations(env, quant.calibration_samples))
    return ExplorationPolicy(network, spec, noise_scale=0.1)


def frames_per_s(env_name: str, policy, workers: int, frames_per_batch: int, batches: int) -> float:
    """Drains ``batches`` batches (after one warm-up batch per worker) and returns frames/s."""
    total = frames_per_batch * (batches + workers)
    pool = ActorPool(env_name, policy, num_workers=workers, frames_per_batch=frames_per_batch, total_frames=total)
    try:
        start, frames = None, 0
        for index, batch in enumerate(pool):
            if index == workers - 1:
                start = time.perf_counter()
            elif start is not None:
                frames += batch.numel()
        return frames / (time.perf_counter() - start)
    finally:
        pool.shutdown()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m actorq.bench actors", description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="cheetah-run")
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--frames-per-batch", type=int, default=250)
    parser.add_argument("--batches", type=int, default=8, help="timed batches per run")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved repetitions")
    parser.add_argument("--quick", action="store_true", help="small policy, few frames (smoke test)")
    parser.add_argument("--out", default="bench-results/actors.json", help="JSON output ('' for none)")
    args = parser.parse_args(argv)
    if args.quick:
        args.width, args.workers, args.frames_per_batch, args.batches, args.rounds = 64, [1], 100, 3, 1
    return args


def main(argv: Sequence[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    rows = []
    for workers in args.workers:
        rates = dict.fromkeys(PRECISIONS, 0.0)
        for _ in range(args.rounds):
            for name, quant in PRECISIONS.items():
                policy = actor_policy(args.env, args.width, quant)
                rate = frames_per_s(args.env, policy, workers, args.frames_per_batch, args.batches)
                rates[name] = max(rates[name], rate)
        for name, rate in rates.items():
            rows.append({"env": args.env, "width": args.width, "workers": workers, "precision": name,
                         "frames_per_s": rate, "vs_fp32": rate / rates["fp32"], "target": TARGET_RATIO})
    report(f"actor frames/s, policy 3x{args.width}, {args.env}", rows, args.out or None)
    return rows


if __name__ == "__main__":
    main()
