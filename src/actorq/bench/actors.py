"""``actorq bench actors``: env frames/s of real actor processes, fp32 vs int8.

The actors are the real thing: TorchRL collector worker processes (one thread each)
stepping ``--env`` (cheetah-run) with a ``17 -> W -> W -> W -> 6`` policy, for every policy
width ``W``, envs per worker and precision (fp32, int8 static, int8 dynamic, auto; the quantized
policy built with ``QuantizedNetwork.from_network`` as the trainer builds it). The main
process only drains batches, so the rate is what one worker can supply.

Each row also shows the ceiling and where the time goes, per frame:

* ``env_us``: one raw simulator step (the suite's own env, random actions, no TorchRL);
  ``raw_rate`` is its steps/s, the ceiling ``of_raw`` is measured against.
* ``policy_env_us``: the same raw simulators, as many as the worker steps, with this
  row's policy choosing the actions; only the steps are timed. The states a policy visits
  can cost the simulator more than random actions' (more contacts), and that difference is
  the simulator's, not overhead.
* ``infer_us``: one policy forward at the worker's batch (``actorq.quant.time_forward``,
  one thread), divided by the envs it serves.
* ``overhead_us = 1e6 / frames_per_s - policy_env_us - infer_us``: everything else
  (TensorDicts, the collector loop, process hand-over).
* ``ceiling_vs_fp32 = (policy_env_us + infer_us of fp32) / (policy_env_us + infer_us)``: the
  ``vs_fp32`` this precision would reach with no overhead at all, i.e. what its forward
  and the simulator alone allow.

``--old-path`` measures the previous paths in the same run, so before/after is one table
(``path`` column): ``lean`` (the default: the lean batched env and the lean rollout of
:class:`~actorq.actors.rollout.LeanCollector`), ``lean env`` (the lean batched env under
TorchRL's own ``Collector.rollout``) and ``old`` (TorchRL's transform stack per env, a
``SerialEnv`` for several, TorchRL's rollout). ``vs_old`` is against ``old``.

Usage (``tests/integration/test_bench_smoke.py`` runs the quick form)::

    actorq bench actors [--quick] [--old-path] [--widths 64 2048] [--envs 1 16]
        [--out FILE.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence

import numpy as np
import torch

from actorq.actors.base import ActorSpec
from actorq.actors.policy import ExplorationPolicy
from actorq.actors.pool import ActorPool
from actorq.bench._table import report
from actorq.envs import EnvSpec, find_suite, make_env, random_observations
from actorq.algos.networks import DeterministicActor
from actorq.quant import QuantizedNetwork, QuantSpec, resolve_precision, time_forward
from actorq.util.arguments import as_options

PRECISIONS = {  # name: the actors' precision (fp32 too is the actors' QuantizedNetwork, as the trainer builds it)
    "fp32": QuantSpec(bits=32),
    "int8 static": QuantSpec(bits=8, mode="static"),
    "int8 dynamic": QuantSpec(bits=8, mode="dynamic"),
    "int8 static onednn": QuantSpec(bits=8, mode="static", engine="onednn"),
    "int8 dynamic onednn": QuantSpec(bits=8, mode="dynamic", engine="onednn"),
    "int8 static plain": QuantSpec(bits=8, mode="static", engine="plain"),
    "int8 dynamic plain": QuantSpec(bits=8, mode="dynamic", engine="plain"),
    "auto": QuantSpec(bits="auto"),  # picked by measurement at the worker's batch, as train.py does
}
DEFAULT_PRECISIONS = ["fp32", "int8 static", "int8 dynamic", "auto"]
TARGET_AUTO = 0.95  # `auto` must never be slower than fp32 (less this much measurement noise)
STEPS_PER_BATCH = 32  # steps of every env of a worker per yielded batch


def actor_policy(env_name: str, width: int, quant: QuantSpec | None, seed: int = 0,
                 batch: int = 1) -> ExplorationPolicy:
    """The actors' policy at ``quant`` (``bits="auto"`` resolved for ``batch`` observations);
    ``None`` gives the learner's own fp32 policy."""
    env = make_env(env_name, seed=seed)
    spec = EnvSpec.from_env(env)
    torch.manual_seed(seed)
    network = DeterministicActor(spec, (width,) * 3)
    if quant is not None and quant.is_auto:
        quant, _ = resolve_precision(network, quant, batch, random_observations(env, quant.calibration_samples))
    if quant is not None:
        network = QuantizedNetwork.from_network(network, quant, random_observations(env, quant.calibration_samples))
    return ExplorationPolicy(network, spec, noise_scale=0.1)


def frames_per_s(env_name: str, policy, workers: int, frames_per_batch: int, batches: int,
                 envs_per_worker: int = 1, pool_class=ActorPool, **pool_options) -> float:
    """Drains ``batches`` batches (after one warm-up batch per worker) of a ``pool_class``
    pool (local processes, or Ray actors) and returns frames/s. ``pool_options`` are fields of
    its :class:`~actorq.actors.base.ActorSpec` (``lean_envs``, ``library``) or the pool's own
    arguments (``lean_rollout``, a Ray pool's ``num_cpus``)."""
    total = frames_per_batch * (batches + workers)
    spec_fields = {field.name for field in dataclasses.fields(ActorSpec)}
    spec = ActorSpec(env_name, num_workers=workers, frames_per_batch=frames_per_batch, total_frames=total,
                     envs_per_worker=envs_per_worker,
                     **{key: value for key, value in pool_options.items() if key in spec_fields})
    pool = pool_class(spec, policy, **{key: value for key, value in pool_options.items() if key not in spec_fields})
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


def raw_rate(env_name: str, steps: int = 3000, seed: int = 0) -> float:
    """Raw simulator steps/s of one env of the suite (random actions, resets included), timed
    after as many untimed steps: a process's first dm_control episode end costs a one-off
    ~0.1 s, which put 3x more time per step into a first timed pass than into a second."""
    raw = find_suite(env_name).make_raw(env_name, 1)
    if raw is None:
        return float("nan")
    env = raw.envs[0]
    rng = np.random.default_rng(seed)
    if raw.discrete:
        actions = rng.integers(raw.num_actions, size=256)
    else:
        actions = rng.uniform(raw.action_low, raw.action_high, size=(256, len(raw.action_low)))
    dm_control = hasattr(env, "physics")
    env.reset()
    for _ in range(2):  # the first pass warms up; the second is timed
        start = time.perf_counter()
        for k in range(steps):
            if dm_control:
                if env.step(actions[k % 256]).last():
                    env.reset()
            else:
                _, _, terminated, truncated, _ = env.step(actions[k % 256])
                if terminated or truncated:
                    env.reset()
    return steps / (time.perf_counter() - start)


def policy_env_us(env_name: str, policy: ExplorationPolicy, envs: int, frames: int = 4096,
                  seed: int = 0) -> float:
    """µs per frame of ``envs`` raw simulators stepped with ``policy``'s actions (the steps
    alone are timed; ended episodes restart untimed); NaN where the suite has no raw envs."""
    raw = find_suite(env_name).make_raw(env_name, envs)
    if raw is None:
        return float("nan")
    obs = np.zeros((envs, raw.obs_dim), dtype=np.float32)
    reward = np.empty((envs, 1), dtype=np.float32)
    terminated, truncated = np.zeros((envs, 1), dtype=bool), np.zeros((envs, 1), dtype=bool)
    for index in range(envs):
        raw.seed(index, seed + index)
        raw.reset(index, obs[index])
    stepping, steps = 0.0, max(1, frames // envs)
    with torch.no_grad():
        for _ in range(steps):
            actions = policy(torch.from_numpy(obs)).numpy()
            start = time.perf_counter()
            raw.step(actions, obs, reward, terminated, truncated)
            stepping += time.perf_counter() - start
            for index in np.flatnonzero(terminated[:, 0] | truncated[:, 0]):
                raw.reset(int(index), obs[index])
            terminated[:], truncated[:] = False, False
    return 1e6 * stepping / (steps * envs)


def inference_us(policy: ExplorationPolicy, env_name: str, batch: int) -> float:
    """µs per forward of ``policy`` at ``batch`` observations (one thread)."""
    observations = random_observations(make_env(env_name, seed=1), batch)
    return time_forward(policy, observations, iterations=200, budget_s=1.0).median_us


def ceiling_vs_fp32(stepped: dict[str, float], infer: dict[str, float], name: str) -> float:
    """``name``'s frames/s against fp32's with no overhead: simulator + forward per frame.

    >>> ceiling_vs_fp32({"fp32": 40.0, "int8": 40.0}, {"fp32": 260.0, "int8": 0.0}, "int8")
    7.5
    """
    if "fp32" not in infer:
        return float("nan")
    return (stepped["fp32"] + infer["fp32"]) / (stepped[name] + infer[name])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="actorq bench actors", description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="cheetah-run")
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 256, 2048])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8, 16], help="envs per worker")
    parser.add_argument("--precisions", nargs="+", default=DEFAULT_PRECISIONS, choices=list(PRECISIONS))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batches", type=int, default=6, help="timed batches per run")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved repetitions (best kept)")
    parser.add_argument("--old-path", action="store_true",
                        help="also measure the previous paths: TorchRL's rollout over the lean env, and "
                             "TorchRL's transforms (SerialEnv) with its rollout")
    parser.add_argument("--onednn", action="store_true",
                        help="also run the int8 precisions with weights packed for torch.ao's onednn engine (quant.engine)")
    parser.add_argument("--plain", action="store_true",
                        help="also run the int8 precisions on plain int8 tensors and oneDNN's kernels "
                             "(quant.engine=plain), the path that replaces torch.ao's quantized modules")
    parser.add_argument("--quick", action="store_true", help="small policy, few frames (smoke test)")
    parser.add_argument("--out", default="bench-results/actors.json", help="JSON output ('' for none)")
    args = parser.parse_args(as_options(argv, parser))
    if args.quick:
        args.widths, args.envs, args.precisions, args.batches, args.rounds = [64], [1, 8], ["fp32", "int8 static"], 3, 1
    plain = [name for name in args.precisions if name in ("int8 static", "int8 dynamic")]
    args.precisions += [f"{name} {engine}" for engine, wanted in (("onednn", args.onednn), ("plain", args.plain))
                        if wanted for name in plain]
    return args


def main(argv: Sequence[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    torch.set_num_threads(1)
    raw = raw_rate(args.env)
    env_us = 1e6 / raw
    paths = {"lean": {}}  # path: its pool options
    if args.old_path:
        paths |= {"lean env": {"lean_rollout": False}, "old": {"lean_envs": False, "lean_rollout": False}}
    rows = []
    for width in args.widths:
        for envs in args.envs:
            frames_per_batch = envs * STEPS_PER_BATCH * (1 if envs > 1 else 4)
            found: dict[tuple[str, str], float] = {}
            infer: dict[str, float] = {}
            stepped: dict[str, float] = {}  # policy_env_us by precision
            for _ in range(args.rounds):
                for name in args.precisions:
                    policy = actor_policy(args.env, width, PRECISIONS[name], batch=envs)
                    if name not in infer:
                        infer[name] = inference_us(policy, args.env, envs) / envs
                        stepped[name] = policy_env_us(args.env, policy, envs)
                    for path, options in paths.items():
                        rate = frames_per_s(args.env, policy, args.workers, frames_per_batch, args.batches,
                                            envs_per_worker=envs, **options)
                        found[path, name] = max(found.get((path, name), 0.0), rate)
            for path in paths:
                for name in args.precisions:
                    rate = found[path, name]
                    row = {"env": args.env, "width": width, "envs": envs, "precision": name, "path": path,
                           "frames_per_s": rate, "vs_fp32": rate / found[path, "fp32"] if "fp32" in args.precisions
                           else float("nan"),
                           "vs_old": rate / found["old", name] if args.old_path else float("nan"),
                           "of_raw": rate / raw, "env_us": env_us, "policy_env_us": stepped[name],
                           "infer_us": infer[name], "overhead_us": 1e6 / rate - stepped[name] - infer[name],
                           "ceiling_vs_fp32": ceiling_vs_fp32(stepped, infer, name)}
                    rows.append(row)
    title = f"actor frames/s per worker ({args.workers} worker), {args.env}, raw env {raw:.0f} steps/s"
    report(title, rows, args.out or None)
    auto = [row for row in rows if row["precision"] == "auto" and row["vs_fp32"] == row["vs_fp32"]]
    if auto:
        worst = min(auto, key=lambda row: row["vs_fp32"])
        verdict = "ok" if worst["vs_fp32"] >= TARGET_AUTO else "MISSED"
        print(f"auto, slowest cell (width {worst['width']}, {worst['envs']} envs, {worst['path']}): "
              f"{worst['vs_fp32']:.2f}x fp32 (target >= {TARGET_AUTO}x) {verdict}")
    return rows


if __name__ == "__main__":
    main()
