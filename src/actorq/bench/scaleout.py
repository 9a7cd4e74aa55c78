"""``actorq bench scaleout``: Ray actors against local processes, and parallel learners.

Four tables from one run, three of them on one local Ray instance started for the benchmark:

* **learners**: learner updates/s of a real run (``actorq train``, TD3 on Pendulum, one
  actor process, ``--learner-frames`` frames, one update per frame) with ``trainer.devices``
  1 and 2: the same total batch (``algo.batch_size``), split over the ranks. Measured before
  Ray starts; each run's ``summary.json`` gives the updates/s (updates over the learner's
  time, waiting for actors excluded) and every rank's update count and weight difference.

* **backend**: frames/s the learner receives from ``--workers`` actors, as local processes
  (:class:`~actorq.actors.pool.ActorPool`) and as Ray actors
  (:class:`~actorq.actors.ray_pool.RayActorPool`), same env, policy, batch and frame count,
  measured alternately ``--rounds`` times (best kept). Target: Ray >= 0.8x processes.
* **push**: one push of QuaRL's 2048x3 policy to the Ray actors, fp32 against the int8
  payload the trainer sends: bytes put in the object store and the push's latency (median
  of ``--pushes``). Targets: int8 bytes <= 0.26x fp32, latency < 0.5x.
* **lockstep**: frames/s of 1, 4 and 8 Ray actors, each stepping ``--lockstep-envs`` envs
  (1; 4 gives the hybrid rows), on a sleep-bound env whose steps take ``--lockstep-step-ms``
  (3 and 10), and 100x that with probability
  0.01 (:mod:`actorq.bench.heavy_tail`), collected in lock-step rounds (``actors.collection=lockstep``)
  and asynchronously, with one and with two (the default) batch requests queued at each
  actor; with the machine's CPU use during the asynchronous run (all cores, 0 to 1): near 1,
  the actors' own work per step, not the collection scheme, sets the rate. Target: async >=
  3x lock-step at 8 actors of one env each.

Usage (``tests/integration/test_bench_smoke.py`` runs the quick form)::

    actorq bench scaleout [--quick] [--env cheetah-run] [--workers 2] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil
import torch

from actorq.actors.base import ActorSpec
from actorq.actors.pool import ActorPool
from actorq.actors.ray_pool import RayActorPool, import_ray
from actorq.bench._table import report, write_json
from actorq.bench.actors import actor_policy, frames_per_s
from actorq.bench.heavy_tail import SLOW_P, HeavyTailSuite, ZeroPolicy, heavy_tail_name
from actorq.envs import register_suite, suites, unregister_suite
from actorq.quant import QuantSpec
from actorq.util.arguments import as_options

TARGET_RAY_RATE = 0.8
TARGET_ASYNC = 3.0  # at 8 actors
TARGET_INT8_BYTES = 0.26
TARGET_INT8_LATENCY = 0.5
BACKENDS = {"process": ActorPool, "ray": RayActorPool}
SLOW_TIMES = 100  # a heavy-tail env's slow step, in usual steps
LOCKSTEP_SCHEMES = {"sync": {"requests_in_flight": 1}, "async_1_in_flight": {"requests_in_flight": 1},
                    "async": {"requests_in_flight": 2}}


def learner_rows(rank_counts: Sequence[int], frames: int, hidden: int, batch_size: int) -> list[dict]:
    """Learner updates/s of one real TD3 run per number of learner ranks, same total batch."""
    rows = []
    for ranks in rank_counts:
        with tempfile.TemporaryDirectory(prefix="actorq-learners-") as run_dir:
            command = [sys.executable, "-m", "actorq", "+experiment=td3_pendulum", f"trainer.devices={ranks}",
                       f"actors.total_frames={frames}", "actors.num_workers=1", "actors.init_random_frames=0",
                       f"algo.learning_starts={frames // 4}", f"algo.batch_size={batch_size}",
                       f"algo.actor_hidden=[{hidden},{hidden}]", f"algo.critic_hidden=[{hidden},{hidden}]",
                       f"eval.every_frames={frames}", "eval.episodes=1", "callbacks=no_checkpoint",
                       "~callbacks.carbon", "trainer.enable_progress_bar=false", f"run_dir={run_dir}"]
            run = subprocess.run(command, capture_output=True, text=True)
            if run.returncode != 0:
                raise RuntimeError(f"the {ranks}-rank learner run failed ({run.returncode}): {run.stderr[-2000:]}")
            summary = json.loads((Path(run_dir) / "summary.json").read_text())
        learners = summary["learners"]
        rows.append({"ranks": ranks, "batch_per_rank": batch_size // ranks, "hidden": f"{hidden}x2",
                     "updates": summary["learner_steps"], "updates_per_s": summary["learner_updates_per_s"],
                     "steps_per_rank": learners["learner_steps"],
                     "max_weight_difference": learners["max_weight_difference"]})
    for row in rows:
        row["vs_1_rank"] = row["updates_per_s"] / rows[0]["updates_per_s"]
    return rows


def lockstep_rows(worker_counts: Sequence[int], envs_per_worker: Sequence[int], steps_per_batch: int,
                  batches_per_worker: int, step_ms: int) -> list[dict]:
    """Frames/s of Ray actors on the heavy-tailed env, lock-step (``sync``) against
    asynchronous with one and with two requests in flight per actor, at each number of
    actors and of envs per actor (one run of each scheme, one after another).
    An actor steps its envs one after another, so a batch of ``steps_per_batch`` steps holds
    ``steps_per_batch * envs`` frames."""
    if HeavyTailSuite.name not in suites():
        register_suite(HeavyTailSuite)
    try:
        rows = []
        for envs in envs_per_worker:
            for workers in worker_counts:
                rates, cpu = {}, {}
                for scheme, options in LOCKSTEP_SCHEMES.items():
                    batch = steps_per_batch * envs
                    spec = ActorSpec(heavy_tail_name(step_ms, SLOW_TIMES * step_ms), num_workers=workers,
                                     envs_per_worker=envs, frames_per_batch=batch,
                                     total_frames=batch * batches_per_worker * workers, library=HeavyTailSuite.name,
                                     collection="lockstep" if scheme == "sync" else "async")
                    pool = RayActorPool(spec, ZeroPolicy(), num_cpus=0, **options)
                    try:
                        psutil.cpu_percent()
                        start = time.perf_counter()
                        frames = sum(batch.numel() for batch in pool)
                        rates[scheme] = frames / (time.perf_counter() - start)
                        cpu[scheme] = psutil.cpu_percent() / 100
                    finally:
                        pool.shutdown()
                rows.append({"step_ms": step_ms, "workers": workers, "envs_per_worker": envs,
                             "steps_per_batch": steps_per_batch,
                             **{f"{scheme}_frames_per_s": rate for scheme, rate in rates.items()},
                             "async_vs_sync": rates["async"] / rates["sync"], "async_cpu_busy": cpu["async"]})
        return rows
    finally:
        unregister_suite(HeavyTailSuite.name)


def push_latency_ms(pool: RayActorPool, policy, pushes: int) -> float:
    """Median ms of ``pool.push(policy)`` until every actor has loaded the weights (object
    store put and every actor's load)."""
    times = []
    for _ in range(pushes):
        start = time.perf_counter()
        pool.push(policy)
        pool.wait_for_loads()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def push_rows(env_name: str, workers: int, width: int, pushes: int) -> list[dict]:
    policies = {"fp32": actor_policy(env_name, width, None),
                "int8 static": actor_policy(env_name, width, QuantSpec(bits=8, mode="static"))}
    rows = []
    for name, policy in policies.items():
        pool = RayActorPool(ActorSpec(env_name, num_workers=workers, frames_per_batch=64, total_frames=64), policy)
        try:
            latency = push_latency_ms(pool, policy, pushes)
            rows.append({"policy": f"{width}x3", "precision": name, "bytes": pool.push_bytes,
                         "push_ms": latency})
        finally:
            pool.shutdown()
    fp32 = rows[0]
    for row in rows:
        row["bytes_vs_fp32"] = row["bytes"] / fp32["bytes"]
        row["push_ms_vs_fp32"] = row["push_ms"] / fp32["push_ms"]
    return rows


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="actorq bench scaleout", description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="cheetah-run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--width", type=int, default=64, help="policy width for the frames/s table")
    parser.add_argument("--frames-per-batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=20, help="timed batches per run")
    parser.add_argument("--rounds", type=int, default=2, help="alternating repetitions (best kept)")
    parser.add_argument("--push-width", type=int, default=2048)
    parser.add_argument("--pushes", type=int, default=10)
    parser.add_argument("--lockstep-workers", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--lockstep-envs", type=int, nargs="+", default=[1], help="envs per actor, lock-step table")
    parser.add_argument("--lockstep-steps", type=int, default=10, help="env steps per batch, lock-step table")
    parser.add_argument("--lockstep-step-ms", type=int, nargs="+", default=[3, 10],
                        help="usual ms per env step, lock-step table (one part of the table each)")
    parser.add_argument("--lockstep-batches", type=int, default=200, help="batches per actor, lock-step table")
    parser.add_argument("--learner-ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--learner-frames", type=int, default=4000, help="frames per run, learners table")
    parser.add_argument("--learner-hidden", type=int, default=256, help="TD3 layer width, learners table")
    parser.add_argument("--learner-batch", type=int, default=256, help="total batch, learners table")
    parser.add_argument("--quick", action="store_true", help="small policy, few frames (smoke test)")
    parser.add_argument("--out", default="bench-results/scaleout.json", help="JSON output ('' for none)")
    args = parser.parse_args(as_options(argv, parser))
    if args.quick:
        args.env, args.frames_per_batch, args.batches, args.rounds = "Pendulum-v1", 64, 3, 1
        args.push_width, args.pushes = 256, 2
        args.lockstep_workers, args.lockstep_envs, args.lockstep_batches = [2], [2], 3
        args.lockstep_step_ms = [3]
        args.learner_frames, args.learner_hidden, args.learner_batch = 400, 16, 32
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, list[dict]]:
    args = parse_args(argv)
    learners = learner_rows(args.learner_ranks, args.learner_frames, args.learner_hidden, args.learner_batch)
    ray = import_ray()
    torch.set_num_threads(1)
    ray.init(address="local", include_dashboard=False, num_cpus=max(args.workers, 1))
    try:
        policy = actor_policy(args.env, args.width, None)
        found = {backend: 0.0 for backend in BACKENDS}
        for _ in range(args.rounds):
            for backend in BACKENDS:
                rate = frames_per_s(args.env, policy, args.workers, args.frames_per_batch, args.batches,
                                    pool_class=BACKENDS[backend])
                found[backend] = max(found[backend], rate)
        backend_rows = [{"env": args.env, "workers": args.workers, "width": args.width, "backend": backend,
                         "frames_per_s": rate, "vs_process": rate / found["process"]}
                        for backend, rate in found.items()]
        push = push_rows(args.env, args.workers, args.push_width, args.pushes)
        lockstep = [row for step_ms in args.lockstep_step_ms
                    for row in lockstep_rows(args.lockstep_workers, args.lockstep_envs, args.lockstep_steps,
                                             args.lockstep_batches, step_ms)]
    finally:
        ray.shutdown()
    report(f"learner updates/s by learner ranks (TD3, Pendulum-v1, total batch {args.learner_batch})",
           learners, None)
    report(f"actor frames/s by backend ({args.workers} workers, {args.env})", backend_rows, None)
    report("push to Ray actors", push, None)
    report(f"lock-step vs asynchronous Ray actors, heavy-tailed env (step_ms per step, {SLOW_TIMES}x that "
           f"with p={SLOW_P})", lockstep, None)
    rows = {"learners": learners, "backend": backend_rows, "push": push, "lockstep": lockstep}
    if args.out:
        write_json("scaleout", [{"table": table, **row} for table, part in rows.items() for row in part], args.out)
    most_ranks = learners[-1]
    print(f"learner updates/s, {most_ranks['ranks']} ranks vs 1: {most_ranks['vs_1_rank']:.2f}x")
    ray_rate = backend_rows[1]["vs_process"]
    int8 = push[1]
    most_actors = max(row["workers"] for row in lockstep)
    async_rows = [(f"async vs lock-step, {row['workers']} actors, {row['step_ms']} ms steps "
                   f"(CPU {row['async_cpu_busy']:.0%} busy)", row["async_vs_sync"], f">= {TARGET_ASYNC}x",
                   row["async_vs_sync"] >= TARGET_ASYNC)
                  for row in lockstep if row["workers"] == most_actors and row["envs_per_worker"] == 1]
    for label, value, target, ok in (
        *async_rows,
        ("Ray frames/s vs processes", ray_rate, f">= {TARGET_RAY_RATE}x", ray_rate >= TARGET_RAY_RATE),
        ("int8 push bytes vs fp32", int8["bytes_vs_fp32"], f"<= {TARGET_INT8_BYTES}x",
         int8["bytes_vs_fp32"] <= TARGET_INT8_BYTES),
        ("int8 push latency vs fp32", int8["push_ms_vs_fp32"], f"< {TARGET_INT8_LATENCY}x",
         int8["push_ms_vs_fp32"] < TARGET_INT8_LATENCY),
    ):
        print(f"{label}: {value:.2f}x (target {target}) {'ok' if ok else 'MISSED'}")
    return rows


if __name__ == "__main__":
    main()
