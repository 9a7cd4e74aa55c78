"""``actorq bench replay``: prioritized replay, ours against cpprb and TorchRL.

One process, one run, side by side: microseconds per ``sample`` of a batch (indices, weights
and data), per priority update of a batch, per sample-and-update cycle and per insert of a
batch, into buffers filled to capacity with random priorities; then our cycle for each
sum-tree fanout, and the insert throughput of 1, 2 and 4 writer processes into the shared
buffer. A peer that cannot be installed or loaded is skipped, with the reason printed.

Usage (``tests/integration/test_bench_replay.py`` runs the quick form)::

    actorq bench replay [--quick] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tensordict import TensorDict

from actorq.bench._table import report
from actorq.data.replay.prioritized import PrioritizedReplay
from actorq.data.replay.shared import SharedReplay
from actorq.util.arguments import as_options

OBS_DIM, ACTION_DIM = 17, 6
ALPHA, BETA, EPS = 0.6, 0.4, 1e-6  # every buffer's; cpprb's own eps default is 1e-4
TARGET_VS_CPPRB, TARGET_VS_TORCHRL = 2.0, 3.0
PEERS = ("actorq", "cpprb", "torchrl")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="actorq bench replay", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--capacity", type=int, default=2**20, help="transitions per buffer")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--iterations", type=int, default=300, help="timed calls per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; best kept")
    parser.add_argument("--fanouts", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--quick", action="store_true", help="small and short (smoke test)")
    parser.add_argument("--out", default="bench-results/replay.json", help="JSON ('' for none)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(as_options(argv, parser))
    if args.quick:
        args.capacity = min(args.capacity, 2**12)
        args.iterations = min(args.iterations, 20)
        args.rounds = min(args.rounds, 2)
        args.fanouts = [4, 16]
        args.writers = [2]
    return args


def transitions(n: int, generator: torch.Generator) -> TensorDict:
    return TensorDict(
        {
            "observation": torch.randn(n, OBS_DIM, generator=generator),
            "action": torch.randn(n, ACTION_DIM, generator=generator),
            "reward": torch.randn(n, generator=generator),
            "next_observation": torch.randn(n, OBS_DIM, generator=generator),
            "discount": torch.ones(n),
        },
        batch_size=[n],
    )


@dataclass
class Contestant:
    """One buffer behind a common face: each callable does one timed operation."""

    sample: Callable[[], object]
    update: Callable[[], None]
    cycle: Callable[[], None]
    insert: Callable[[], None]


def ours(data: TensorDict, batch: TensorDict, args, fanout: int = 16) -> Contestant:
    buffer = PrioritizedReplay(args.capacity, alpha=ALPHA, beta=BETA, fanout=fanout, eps=EPS)
    rng = np.random.default_rng(args.seed)
    for start in range(0, args.capacity, 2**16):
        chunk = data[start : start + 2**16]
        buffer.extend(chunk)
        indices = torch.arange(start, start + len(chunk))
        buffer.update_priorities(indices, torch.from_numpy(rng.random(len(chunk))))
    priorities = torch.from_numpy(rng.random(args.batch_size))
    indices = buffer.sample(args.batch_size).indices

    def cycle():
        sample = buffer.sample(args.batch_size)
        buffer.update_priorities(sample.indices, priorities)

    return Contestant(
        sample=lambda: buffer.sample(args.batch_size),
        update=lambda: buffer.update_priorities(indices, priorities),
        cycle=cycle,
        insert=lambda: buffer.extend(batch),
    )


def cpprb(data: TensorDict, batch: TensorDict, args) -> Contestant:
    from cpprb import PrioritizedReplayBuffer

    names = {
        "obs": "observation",
        "act": "action",
        "rew": "reward",
        "next_obs": "next_observation",
        "done": "discount",
    }

    def columns(rows: TensorDict) -> dict[str, np.ndarray]:
        return {short: rows[name].numpy() for short, name in names.items()}

    shapes = {"obs": OBS_DIM, "act": ACTION_DIM, "rew": 1, "next_obs": OBS_DIM, "done": 1}
    env_dict = {short: {"shape": shape} for short, shape in shapes.items()}
    buffer = PrioritizedReplayBuffer(args.capacity, env_dict, alpha=ALPHA, eps=EPS)
    buffer.add(**columns(data))
    rng = np.random.default_rng(args.seed)
    buffer.update_priorities(np.arange(args.capacity), rng.random(args.capacity))
    priorities = rng.random(args.batch_size)
    indices = buffer.sample(args.batch_size, beta=BETA)["indexes"]
    batch_columns = columns(batch)

    def cycle():
        sample = buffer.sample(args.batch_size, beta=BETA)
        buffer.update_priorities(sample["indexes"], priorities)

    return Contestant(
        sample=lambda: buffer.sample(args.batch_size, beta=BETA),
        update=lambda: buffer.update_priorities(indices, priorities),
        cycle=cycle,
        insert=lambda: buffer.add(**batch_columns),
    )


def torchrl(data: TensorDict, batch: TensorDict, args) -> Contestant:
    from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

    buffer = TensorDictPrioritizedReplayBuffer(
        alpha=ALPHA,
        beta=BETA,
        eps=EPS,
        storage=LazyTensorStorage(args.capacity),
        batch_size=args.batch_size,
        priority_key="td_error",
    )
    for start in range(0, args.capacity, 2**16):
        buffer.extend(data[start : start + 2**16].clone())
    generator = torch.Generator().manual_seed(args.seed)
    initial = torch.rand(args.capacity, generator=generator)
    buffer.update_priority(torch.arange(args.capacity), initial)
    priorities = torch.rand(args.batch_size, generator=generator)
    indices = buffer.sample()["index"]

    def cycle():
        sample = buffer.sample()
        buffer.update_priority(sample["index"], priorities)

    return Contestant(
        sample=buffer.sample,
        update=lambda: buffer.update_priority(indices, priorities),
        cycle=cycle,
        insert=lambda: buffer.extend(batch.clone()),
    )


def best_microseconds(operations: dict[str, Callable[[], object]], args) -> dict[str, float]:
    """Best-of-rounds mean time per call, the operations interleaved round by round so
    that a change in machine load hits all of them alike."""
    best = dict.fromkeys(operations, float("inf"))
    for _ in range(args.rounds):
        for name, operation in operations.items():
            operation()  # warm up
            start = time.perf_counter()
            for _ in range(args.iterations):
                operation()
            elapsed = (time.perf_counter() - start) / args.iterations * 1e6
            best[name] = min(best[name], elapsed)
    return best


def compare_peers(args, data: TensorDict, batch: TensorDict) -> tuple[list[dict], list[str]]:
    contestants, notes = {"actorq": ours(data, batch, args)}, []
    for name, build in (("cpprb", cpprb), ("torchrl", torchrl)):
        try:
            contestants[name] = build(data, batch, args)
            contestants[name].cycle()
        except Exception as error:  # noqa: BLE001 - any failure to install or load skips the peer
            contestants.pop(name, None)
            reason = str(error).splitlines()[0].split(". ")[0]
            notes.append(f"{name} skipped: {type(error).__name__}: {reason}")
            print(notes[-1])
    rows = []
    cases = (
        ("sample", "sample"),
        ("update priorities", "update"),
        ("sample + update", "cycle"),
        ("insert", "insert"),
    )
    for case, attribute in cases:
        timings = best_microseconds(
            {name: getattr(c, attribute) for name, c in contestants.items()}, args
        )
        rows.append(_row("peers", f"{case} ({args.batch_size})", "us", timings))
    return rows, notes


def fanout_sweep(args, data: TensorDict, batch: TensorDict) -> list[dict]:
    rows = []
    for fanout in args.fanouts:
        contestant = ours(data, batch, args, fanout=fanout)
        timings = best_microseconds(
            {"sample": contestant.sample, "update": contestant.update, "cycle": contestant.cycle},
            args,
        )
        for case, value in timings.items():
            rows.append(_row("fanout", f"K={fanout} {case}", "us", {"actorq": value}))
    return rows


def _write_batches(writer, batches: int, batch_size: int, seed: int, start, finish) -> None:
    """Writer process of the throughput test; the barriers bracket the timed part."""
    torch.set_num_threads(1)
    batch = transitions(batch_size, torch.Generator().manual_seed(seed))
    start.wait()
    for _ in range(batches):
        writer.write(batch)
    finish.wait()


def shared_writers(args, batch: TensorDict) -> list[dict]:
    """Transitions per second that ``n`` writer processes insert together."""
    context = multiprocessing.get_context("spawn")
    batches = max(args.capacity // args.batch_size, 64)
    rows = []
    for count in args.writers:
        buffer = SharedReplay(args.capacity, template=batch[0], alpha=ALPHA, beta=BETA)
        start, finish = context.Barrier(count + 1), context.Barrier(count + 1)
        workers = [
            context.Process(
                target=_write_batches,
                args=(buffer.writer(), batches, args.batch_size, args.seed + w, start, finish),
            )
            for w in range(count)
        ]
        try:
            for worker in workers:
                worker.start()
            start.wait(timeout=300)
            began = time.perf_counter()
            finish.wait(timeout=300)
            elapsed = time.perf_counter() - began
            for worker in workers:
                worker.join(timeout=60)
        finally:
            for worker in workers:
                if worker.is_alive():
                    worker.terminate()
                worker.join()
        written, kept = buffer.reserved, len(buffer)
        if written != count * batches * args.batch_size or kept != min(written, args.capacity):
            raise RuntimeError(f"shared replay lost transitions: {written} written, {kept} kept")
        label = f"{count} writer{'s' if count > 1 else ''}, insert"
        rows.append(_row("shared", label, "rows/s", {"actorq": written / elapsed}))
    return rows


def _row(section: str, case: str, unit: str, values: dict[str, float]) -> dict:
    row = {"section": section, "case": case, "unit": unit}
    row.update({peer: values.get(peer, "") for peer in PEERS})
    for peer in PEERS[1:]:
        both = peer in values and "actorq" in values
        row[f"{peer}/actorq"] = values[peer] / values["actorq"] if both else ""
    return row


def main(argv: Sequence[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(args.seed)
    data = transitions(args.capacity, generator)
    batch = transitions(args.batch_size, generator)
    rows, notes = compare_peers(args, data, batch)
    rows += fanout_sweep(args, data, batch)
    rows += shared_writers(args, batch)
    for note in notes:
        rows.append({**dict.fromkeys(rows[0], ""), "section": "note", "case": note})
    report(
        f"replay: capacity {args.capacity}, batch {args.batch_size}, best of {args.rounds} "
        f"rounds x {args.iterations} calls",
        rows,
        args.out or None,
    )
    if args.quick:  # the targets are about the full-size setting
        return rows
    cycle = next(row for row in rows if row["case"].startswith("sample + update"))
    for peer, target in (("cpprb", TARGET_VS_CPPRB), ("torchrl", TARGET_VS_TORCHRL)):
        ratio = cycle[f"{peer}/actorq"]
        if ratio != "":
            verdict = "met" if ratio >= target else "MISSED"
            print(f"sample + update vs {peer}: {ratio:.2f}x faster (target {target}x: {verdict})")
    return rows


if __name__ == "__main__":
    main()
