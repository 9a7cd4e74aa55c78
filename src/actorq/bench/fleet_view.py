"""The fleet view of ``actorq bench regime --fleet``: how fast a PPO run on Atari goes with
``N`` actor cores beside one learner, fp32 against int8 actors, predicted from the two sides
measured apart and checked by real runs.

``actorq bench regime --fleet [--trunks nature] [--cores 1 2 4 8 16] [--learner-fps F]
[--check 1] [--rollouts 4] [--quick] [--out FILE.json]``

Measured apart, each pinned to a core of its own (``actors.cores``):

- **one actor core**: a real actor worker (the pool, the lean rollout, the actors' policy
  as a run pushes it, int8 static or fp32) collecting ``ppo_breakout``'s batches of 8 envs x
  128 steps with nobody training: ``a`` frames/s;
- **the learner**: ``ppo_breakout``'s PPO update of one rollout (:func:`actorq.bench.pixel_learner.time_real_learner`)
  on one core, at ``--learner-precision``: ``L`` frames/s, or ``--learner-fps`` for a learner
  measured elsewhere (a GPU);
- **a push**: encoding the policy at the actors' precision (calibrating the int8 copy) and
  measuring its KL, once per rollout: ``p`` seconds.

Predicted frames/s of a run with ``N`` actor cores, ``F`` frames per rollout:

- lock-step (PPO's default: the actors and the learner take turns):
  ``F / (F / (N a) + F / L + p)``;
- asynchronous (``actors.collection=async``): ``min(N a, F / (F / L + p))``.

``--check N``: real ``ppo_breakout`` runs with ``N`` workers on cores ``1..N`` and the learner
on core 0, fp32 and int8, whose steady frames/s (the ``collect/frames`` curve) stand beside
the prediction.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from actorq.bench._table import report
from actorq.bench.pixel_learner import ACTIONS, ENVS, FRAME_SHAPE, STEPS, time_real_learner
from actorq.util.arguments import as_options

PRECISIONS = {"fp32": 32, "int8": 8}
FRAMES_PER_ROLLOUT = ENVS * STEPS


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="actorq bench regime --fleet", description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="breakout")
    parser.add_argument("--trunks", nargs="+", default=["nature"], choices=["nature", "impala"])
    parser.add_argument("--cores", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="actor cores to predict for")
    parser.add_argument("--learner-precision", default="32-true", choices=["32-true", "bf16-mixed"],
                        help="trainer.precision of the learner measured and of the check runs")
    parser.add_argument("--learner-fps", type=float, default=None,
                        help="the learner's frames/s, measured elsewhere (default: measured here on one core)")
    parser.add_argument("--check", type=int, nargs="*", default=[1], help="actor cores of real runs beside the prediction")
    parser.add_argument("--rollouts", type=int, default=4, help="timed rollouts per measurement")
    parser.add_argument("--check-rollouts", type=int, default=12, help="rollouts of each real run")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--out", default="bench-results/fleet_view.json", help="JSON output ('' for none)")
    args = parser.parse_args(as_options(argv, parser))
    if args.quick:
        args.rollouts, args.check_rollouts, args.cores, args.trunks = 1, 3, [1, 2], args.trunks[:1]
    return args


@contextlib.contextmanager
def on_core(core: int, threads: int = 1) -> Iterator[None]:
    """This process pinned to ``core`` with ``threads`` torch threads, put back after."""
    affinity, previous = os.sched_getaffinity(0), torch.get_num_threads()
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        os.sched_setaffinity(0, affinity)
        torch.set_num_threads(previous)


def cores_for(workers: int) -> tuple[int, ...]:
    """The cores the actors get: 1..workers (core 0 is the learner's), wrapped onto this machine's."""
    available = sorted(os.sched_getaffinity(0))
    actor_cores = available[1:] or available
    return tuple(actor_cores[i % len(actor_cores)] for i in range(workers))


def ppo_learner(trunk: str):
    """``ppo_breakout``'s learner on Breakout's frames, untrained."""
    from actorq.algos.ppo import PPO
    from actorq.envs import EnvSpec

    spec = EnvSpec(obs_dim=math.prod(FRAME_SHAPE), discrete=True, num_actions=ACTIONS, frame_shape=FRAME_SHAPE)
    torch.manual_seed(0)
    return PPO(spec, pixel_trunk=trunk)


def calibration_frames(game: str, count: int) -> torch.Tensor:
    """``count`` frames a random policy sees (what the first push calibrates on)."""
    from actorq.envs import make_batched_env, random_observations

    env = make_batched_env(game, ENVS, seed=0, library="atari")
    try:
        return random_observations(env, count)
    finally:
        env.close()


def actor_fps(game: str, trunk: str, bits: int, core: int, rollouts: int) -> float:
    """Frames/s of one real actor worker pinned to ``core``, nobody training: the pool's
    batches of ``ENVS x STEPS``, timed after the first."""
    from actorq.actors.base import ActorSpec
    from actorq.actors.policy import actor_policy
    from actorq.actors.pool import ActorPool
    from actorq.quant import QuantSpec

    learner = ppo_learner(trunk)
    quant = QuantSpec(bits=bits, mode="static")
    policy = actor_policy(learner, quant, calibration_frames(game, 256))
    spec = ActorSpec(game, library="atari", num_workers=1, envs_per_worker=ENVS, frames_per_batch=FRAMES_PER_ROLLOUT,
                     total_frames=FRAMES_PER_ROLLOUT * (rollouts + 1), collection="lockstep", cores=(core,))
    pool = ActorPool(spec, policy)
    try:
        batches = iter(pool)
        next(batches)  # the worker's start and first batch
        started = time.perf_counter()
        frames = sum(batch.numel() for batch in batches)
        return frames / (time.perf_counter() - started)
    finally:
        pool.shutdown()


def push_seconds(game: str, trunk: str, bits: int, rollouts: int) -> float:
    """Seconds one push costs the learner: the policy encoded at the actors' precision
    (calibrated on ``quant.calibration_samples`` frames for int8) and its KL measured on 256
    held-out frames, as :meth:`actorq.experience.Experience.push` does."""
    from actorq.actors.policy import actor_policy
    from actorq.quant import QuantSpec, quantize
    from actorq.quant.fidelity import policy_divergence

    learner = ppo_learner(trunk)
    quant = QuantSpec(bits=bits, mode="static", calibration_samples=256)
    frames = calibration_frames(game, 512)
    actors = actor_policy(learner, quant, frames[:256]).network
    seconds = []
    for _ in range(rollouts):
        started = time.perf_counter()
        actors.load_payload(quantize(learner.policy, quant, frames[:256]))
        if bits != 32:
            policy_divergence(learner.policy, actors, frames[256:], None, ENVS)
        seconds.append(time.perf_counter() - started)
    return min(seconds)


def predicted(actor: float, learner: float, push: float, cores: int) -> dict[str, float]:
    """Frames/s with ``cores`` actor cores of ``actor`` frames/s each, a learner of ``learner``
    frames/s and ``push`` seconds per rollout, lock-step and asynchronous.

    >>> {k: round(v) for k, v in predicted(1000.0, 250.0, 0.0, 1).items()}
    {'lockstep': 200, 'async': 250}
    """
    frames = FRAMES_PER_ROLLOUT
    learn = frames / learner + push
    return {"lockstep": frames / (frames / (cores * actor) + learn), "async": min(cores * actor, frames / learn)}


def measured_run_fps(game: str, trunk: str, bits: int, workers: int, rollouts: int, runs_dir: Path,
                     learner_precision: str = "32-true") -> float:
    """Steady frames/s of a real ``ppo_breakout``-style run: ``workers`` actor workers on
    cores 1..workers, the learner in this process on core 0 with one thread."""
    from hydra import compose, initialize_config_module

    from actorq.bench._runs import steady_frames_per_s
    from actorq.train import train

    run_dir = runs_dir / f"{trunk}-{bits}-{workers}-{learner_precision}"
    overrides = ["+experiment=ppo_breakout", f"env.name={game}", f"algo.pixel_trunk={trunk}", f"quant.bits={bits}",
                 f"actors.num_workers={workers}", f"actors.cores=[{','.join(map(str, cores_for(workers)))}]",
                 f"actors.frames_per_batch={FRAMES_PER_ROLLOUT // workers}",
                 f"actors.envs_per_worker={max(1, ENVS // workers)}",
                 f"actors.total_frames={FRAMES_PER_ROLLOUT * rollouts}", "~callbacks.evaluation",
                 "~callbacks.carbon", "callbacks=no_checkpoint", "trainer.enable_progress_bar=false",
                 f"trainer.precision={learner_precision}",
                 f"run_dir={run_dir}"]
    with initialize_config_module("actorq.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with on_core(sorted(os.sched_getaffinity(0))[0]):
        train(cfg)
    return steady_frames_per_s(run_dir / "tb")


def main(argv: Sequence[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    learner_core, actor_core = sorted(os.sched_getaffinity(0))[0], cores_for(1)[0]
    rows = []
    runs_dir = Path(tempfile.mkdtemp(prefix="actorq-fleet-"))
    for trunk in args.trunks:
        with on_core(learner_core):
            precision = "bf16" if args.learner_precision == "bf16-mixed" else "fp32"
            learner = args.learner_fps or FRAMES_PER_ROLLOUT / time_real_learner(trunk, args.rollouts, precision)
        for name, bits in PRECISIONS.items():
            actor = actor_fps(args.game, trunk, bits, actor_core, args.rollouts)
            with on_core(learner_core):
                push = push_seconds(args.game, trunk, bits, args.rollouts)
            print(f"{trunk} {name}: one actor core {actor:.0f} frames/s, learner {learner:.0f} frames/s, "
                  f"push {1e3 * push:.0f} ms", flush=True)
            for cores in sorted(set(args.cores) | set(args.check)):
                fps = predicted(actor, learner, push, cores)
                measured = (measured_run_fps(args.game, trunk, bits, cores, args.check_rollouts, runs_dir,
                                             args.learner_precision)
                            if cores in args.check else float("nan"))
                rows.append({"trunk": trunk, "learner": args.learner_precision, "actors": name, "actor_cores": cores,
                             "actor_fps_per_core": actor,
                             "learner_fps": learner, "push_ms": 1e3 * push, "predicted_lockstep_fps": fps["lockstep"],
                             "predicted_async_fps": fps["async"], "measured_lockstep_fps": measured})
                if cores in args.check:
                    print(f"  {cores} actor core(s): predicted {fps['lockstep']:.0f} frames/s in lock-step, "
                          f"measured {measured:.0f}", flush=True)
    report(f"regime --fleet: PPO on {args.game}, {FRAMES_PER_ROLLOUT} frames per rollout", rows, args.out or None)
    return rows
