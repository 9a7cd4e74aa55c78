"""What one frame of Atari costs the actor fleet: a convolutional policy's actor on one core,
fp32 against int8, beside the env alone and the policy alone.

``actorq bench fleet [--game breakout] [--trunks nature impala] [--envs 8]
[--steps 200] [--env-impls ale gymnasium] [--engines x86 onednn plain] [--calibration minmax]
[--learner-fps 2000 10000] [--quick] [--out FILE.json]``

Everything runs in this process pinned to one core, with one torch thread and one emulator
thread: an actor worker as a fleet of cheap CPU cores runs it. A frame is one agent step (4
emulator frames, max-pooled, 84x84 grayscale, 4 stacked: :mod:`actorq.envs.atari`). Each of
``--repeats`` rounds times every row once in turn and a row keeps its median, so a slower
spell of a shared machine falls on all rows alike. Rows:

- ``env alone``: the emulators alone, random actions, for each of ``--env-impls``: ``ale``
  (ale-py's vector env, preprocessing in C++: what the actors run) and ``gymnasium`` (one
  gymnasium env per emulator with ``AtariPreprocessing`` and ``FrameStackObservation``, stepped
  in turn by ``SyncVectorEnv``; it needs OpenCV, ``pip install opencv-python-headless``, and
  lacks fire-reset and episodic life, which cost nothing per step);
- per trunk and precision (fp32 in both activation layouts, the default and channels-last:
  fp32 actors run the one they measure faster, :mod:`actorq.util.memory_format`):
  ``infer_us`` (the policy alone, per frame, at the actor's batch of
  ``--envs`` frames), ``actor_fps`` (env step, policy, sampled actions: the actor's loop),
  ``ceiling_fps`` (what the loop would reach with no overhead: one over env plus inference),
  ``core_s_per_frame`` (one over ``actor_fps``: the fleet's cost of a frame), ``payload_bytes``
  (the policy's state as a push moves it) and ``quantize_ms`` (calibrating and converting the
  int8 copy: the learner's cost per pushed version), ``vs_fp32`` (frames/s over the faster
  fp32 layout's);
- per learner speed in ``--learner-fps``: the actor cores it needs, fp32 and int8.

The int8 copy is :func:`actorq.quant.conv.quantize_conv_policy`, calibrated on frames the
random policy saw with ``--calibration``'s observer (a run's default, ``quant.calibration``),
once per int8 engine in ``--engines`` (by default each x86 or onednn engine this torch has, and
``plain``: plain int8 tensors on oneDNN's kernels, :mod:`actorq.quant.plain_conv`, whose
``quant.bits=8`` copy runs IMPALA-CNN's first stage in int8 too).
Every engine gets its row, and ``run_with`` names the overrides that give a run that copy:
the default engine's row (``quant.engine=null``: ``plain`` where torch has its kernels,
:func:`actorq.quant.onednn.default_engine`) is what ``quant.bits=8`` runs, so the table shows
what a run gets beside what the other engines would give on this CPU. A trunk
whose first stage ``quant.bits=8`` keeps in fp32 (IMPALA-CNN's) also gets the copy with every
layer in int8 (``quant.format=int8_static``); ``quant.bits=8`` also keeps the output layer
in fp32 (:func:`~actorq.quant.conv.fp32_parts`), a thin layer whose int8 copy a Nature-CNN
row does not time.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from collections.abc import Callable

import numpy as np
import torch

from actorq.algos.conv import PixelPolicy
from actorq.bench._table import report, write_json
from actorq.envs.atari import make_atari
from actorq.quant._ao import DEFAULT_ENGINE, ENGINES, FX_OBSERVERS
from actorq.quant import QuantSpec, onednn, plain_conv
from actorq.quant.conv import first_stage, full_range_for, quantize_conv_policy, serialized_bytes
from actorq.run.learner_precision import cpu_fields, device_name
from actorq.util.arguments import as_options
from actorq.util.memory_format import set_channels_last

INT8_ENGINES = tuple(engine for engine in ("x86", "onednn", "fbgemm") if engine in ENGINES) + onednn.engines()
"""The int8 engines with server-CPU convolution kernels that this torch build has (``plain``:
plain int8 tensors on oneDNN's kernels, :mod:`actorq.quant.plain_conv`)."""
DEFAULT_ENGINES = [engine for engine in INT8_ENGINES if engine != "fbgemm"]
"""The engines timed unless ``--engines`` says otherwise (fbgemm: what x86 runs for most shapes)."""

RUN_CALIBRATION = QuantSpec().calibration
"""The observer a run's int8 copy calibrates with unless ``quant.calibration`` says otherwise."""

CPU_FLAGS = ("avx2", "avx512_vnni", "avx512_bf16", "amx_int8")
"""The CPU features that decide int8 and bf16 speed, reported with every run."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="actorq bench fleet", description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="breakout", help="ale-py ROM name")
    parser.add_argument("--trunks", nargs="+", default=["nature", "impala"], help="convolutional trunks")
    parser.add_argument("--envs", type=int, default=8, help="emulators per actor (its batch)")
    parser.add_argument("--steps", type=int, default=200, help="loop steps per measurement (x envs frames)")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per row (the median is kept)")
    parser.add_argument("--env-impls", nargs="+", default=["ale"], choices=sorted(ENV_IMPLS),
                        help="emulator paths timed alone (the actor loop runs the first)")
    parser.add_argument("--engines", nargs="+", default=DEFAULT_ENGINES, choices=INT8_ENGINES,
                        help="int8 engines to time (quant.engine), one row each")
    parser.add_argument("--calibration", default=RUN_CALIBRATION, choices=sorted(FX_OBSERVERS),
                        help="observer of the int8 copy's activation ranges (quant.calibration)")
    parser.add_argument("--learner-fps", type=float, nargs="*", default=[2000.0, 10000.0],
                        help="learner speeds (frames/s) to size the fleet for")
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke run")
    parser.add_argument("--out", default="bench-results/fleet.json", help="JSON output ('' for none)")
    args = parser.parse_args(as_options(argv, parser))
    if args.quick:
        args.trunks, args.envs, args.steps, args.repeats = args.trunks[:1], 2, 8, 1
    if args.envs < 1 or args.steps < 1 or args.repeats < 1:
        parser.error("--envs, --steps and --repeats must be positive")
    if not args.engines:
        parser.error(f"no x86, onednn, fbgemm or plain int8 engine in this torch build ({', '.join(ENGINES)})")
    return args


def gymnasium_atari(game: str, num_envs: int, seed: int = 0):
    """One gymnasium env per emulator with the usual per-env wrappers, stepped in turn."""
    import ale_py
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gym.register_envs(ale_py)
    name = "ALE/" + "".join(part.title() for part in game.split("_")) + "-v5"

    def make():
        env = gym.make(name, frameskip=1, repeat_action_probability=0.0)
        return FrameStackObservation(AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84), 4)

    env = gym.vector.SyncVectorEnv([make for _ in range(num_envs)])
    env.reset(seed=seed)
    return env


ENV_IMPLS = {"ale": lambda game, envs: make_atari(game, envs, seed=0), "gymnasium": gymnasium_atari}
"""The emulator paths the benchmark can time: name -> (game, envs) -> a vector env."""


def pin_to_one_core() -> int:
    """Pins this process to the first core it may run on, with one torch thread; returns the core."""
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    return core


def _per_frame(run: Callable[[], None], frames: int) -> Callable[[], float]:
    """A timer: runs ``run`` once and returns its seconds per frame (``frames`` frames a run)."""
    def timed() -> float:
        started = time.perf_counter()
        run()
        return (time.perf_counter() - started) / frames
    return timed


def _median_time(run: Callable[[], None], repeats: int) -> float:
    return interleaved_medians({"run": _per_frame(run, 1)}, repeats)["run"]


def interleaved_medians(timers: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Each timer's median over ``repeats`` rounds, after a warm-up round (allocations, packed
    weights, first emulator frames). Every round runs each timer once in turn, so a slower
    spell of a shared machine falls on every row alike and the ratios between rows hold."""
    for timer in timers.values():
        timer()
    times = {name: [] for name in timers}
    for _ in range(repeats):
        for name, timer in timers.items():
            times[name].append(timer())
    return {name: float(np.median(seconds)) for name, seconds in times.items()}


def calibration_frames(env, steps: int) -> torch.Tensor:
    """Frames the random policy sees, ``[steps * envs, 4, 84, 84]`` uint8."""
    frames, _ = env.reset()
    seen = [frames]
    for _ in range(steps - 1):
        frames, *_ = env.step(env.action_space.sample())
        seen.append(frames)
    return torch.from_numpy(np.concatenate(seen))


def env_timer(env, steps: int) -> Callable[[], float]:
    """Seconds per frame of the emulators alone, random actions."""
    actions = [env.action_space.sample() for _ in range(steps)]

    def run():
        for action in actions:
            env.step(action)
    return _per_frame(run, steps * env.num_envs)


def inference_timer(policy, frames: torch.Tensor) -> Callable[[], float]:
    """Seconds per frame of the policy alone at the batch of ``frames``."""
    steps = 50

    @torch.no_grad()
    def run():
        for _ in range(steps):
            policy(frames)
    return _per_frame(run, steps * len(frames))


def actor_timer(env, policy, steps: int) -> Callable[[], float]:
    """Seconds per frame of the actor's loop: policy on the frames, actions sampled, env step.
    Each run goes on from the frames this loop last saw (the env steps between its runs too)."""
    frames = None

    @torch.no_grad()
    def run():
        nonlocal frames
        if frames is None:
            frames, _ = env.reset()
        for _ in range(steps):
            logits = policy(torch.from_numpy(frames))
            actions = torch.distributions.Categorical(logits=logits).sample().numpy()
            frames, *_ = env.step(actions)
    return _per_frame(run, steps * env.num_envs)


def int8_copies(policy, frames: torch.Tensor, engines: list[str], calibration: str, repeats: int):
    """Per engine, the int8 copies of ``policy`` calibrated on ``frames``: the one
    ``quant.bits=8`` runs (its :func:`~actorq.quant.conv.fp32_parts` in fp32) and, where
    its first stage is not empty, the one with every layer in int8 (``quant.format=int8_static``).
    Yields ``(precision, engine, overrides, copy, ms)``: ms is the median time its
    quantization takes (the learner's cost per pushed version; the first quantization of a
    process, several times dearer, is a warm-up). ``plain``'s copy is encoded and built (the
    learner's and an actor's share of a version), its first stage int8 under ``quant.bits=8``."""
    variants = [(True, "")] + ([(False, ", all int8")] if first_stage(policy) else [])
    for engine in engines:
        if engine == onednn.PLAIN:  # its first stage is int8 under quant.bits=8 already: one copy
            def build(calibration=calibration):
                return plain_conv.decode(policy, plain_conv.encode(policy, frames, True, calibration=calibration), True)
            seconds = _median_time(build, repeats)
            yield f"int8 static ({engine})", engine, run_overrides(engine, calibration), build(), 1000 * seconds
            continue
        full_range = full_range_for(engine)  # measured once per process: not a per-version cost
        for fp32_ends, label in variants:
            def quantize(engine=engine, full_range=full_range, fp32_ends=fp32_ends):
                return quantize_conv_policy(policy, frames, engine=engine, full_range=full_range,
                                            observer=calibration, fp32_ends=fp32_ends)
            seconds = _median_time(quantize, repeats)
            overrides = run_overrides(engine, calibration) + ("" if fp32_ends else " quant.format=int8_static")
            yield f"int8 static{label} ({engine})", engine, overrides, quantize(), 1000 * seconds


def run_overrides(engine: str, calibration: str) -> str:
    """The overrides under which a run's actors get the int8 copy of ``engine`` and
    ``calibration``."""
    overrides = ["quant.bits=8"]
    if engine != (onednn.default_engine(convolutional=True) or DEFAULT_ENGINE):
        overrides.append(f"quant.engine={engine}")
    if calibration != RUN_CALIBRATION:
        overrides.append(f"quant.calibration={calibration}")
    return " ".join(overrides)


def measure(args: argparse.Namespace) -> list[dict]:
    """The table's rows. Every row's timings are taken in the same rounds
    (:func:`interleaved_medians`); the int8 copies are quantized before the first round."""
    core = pin_to_one_core()
    flags = set(cpu_fields().get("flags", "").split())
    cpu = f"{device_name('cpu')}; {' '.join(f for f in CPU_FLAGS if f in flags) or 'none of ' + '/'.join(CPU_FLAGS)}"
    envs = {impl: ENV_IMPLS[impl](args.game, args.envs) for impl in args.env_impls}
    env = envs[args.env_impls[0]]  # the actors' own, which the actor loop runs
    frames = calibration_frames(env, max(8, 256 // args.envs))
    batch = frames[: args.envs]
    timers = {("-", f"env alone ({impl})"): env_timer(other, args.steps) for impl, other in envs.items()}
    policies = {}
    for trunk in args.trunks:
        torch.manual_seed(0)
        fp32 = PixelPolicy(trunk, frames.shape[1], env.single_action_space.n).eval()
        fp32_last = set_channels_last(copy.deepcopy(fp32), True)
        copies = [("fp32", "-", "-", fp32, 0.0), ("fp32 channels-last", "-", "-", fp32_last, 0.0)]
        copies += int8_copies(fp32, frames, args.engines, args.calibration, args.repeats)
        for precision, engine, overrides, policy, cost_ms in copies:
            policies[trunk, precision] = engine, overrides, policy, cost_ms
            timers[trunk, precision, "infer"] = inference_timer(policy, batch)
            timers[trunk, precision, "actor"] = actor_timer(env, policy, args.steps)
    seconds = interleaved_medians(timers, args.repeats)
    for other in envs.values():
        other.close()
    alone = {impl: seconds["-", f"env alone ({impl})"] for impl in args.env_impls}
    env_s = alone[args.env_impls[0]]
    common = {"core": core, "cpu": cpu}
    rows = [{"trunk": "-", "precision": f"env alone ({impl})", "infer_us": 0.0, "actor_fps": 1 / impl_s,
             "ceiling_fps": 1 / impl_s, "core_s_per_frame": impl_s, "payload_bytes": 0, "quantize_ms": 0.0,
             "engine": "-", "run_with": "-", **common} for impl, impl_s in alone.items()]
    for (trunk, precision), (engine, overrides, policy, cost_ms) in policies.items():
        infer_s, actor_s = seconds[trunk, precision, "infer"], seconds[trunk, precision, "actor"]
        rows.append({"trunk": trunk, "precision": precision, "infer_us": 1e6 * infer_s, "actor_fps": 1 / actor_s,
                     "ceiling_fps": 1 / (env_s + infer_s), "core_s_per_frame": actor_s,
                     "payload_bytes": copy_bytes(policy), "quantize_ms": cost_ms,
                     "engine": engine, "run_with": overrides, **common})
    return rows


def copy_bytes(policy: torch.nn.Module) -> int:
    """What a push of ``policy``'s version moves: its state, or for a plain int8 copy (whose
    layers hold their codes, scales and biases as attributes) those tensors and its fp32 layers'."""
    if not any(isinstance(module, (onednn.Int8Conv2d, onednn.Int8Linear)) for module in policy.modules()):
        return serialized_bytes(policy)
    tensors = [t for m in policy.modules() for t in (*vars(m).values(), *m._parameters.values())
               if isinstance(t, torch.Tensor) and t.layout == torch.strided and not t.is_mkldnn]
    return sum(t.numel() * t.element_size() for t in tensors)


def fleet_rows(rows: list[dict], learner_fps: list[float]) -> list[dict]:
    """The actor cores a learner of each speed needs, per trunk and precision: its frames/s
    times the core-seconds a frame costs."""
    return [{"learner_fps": speed, "trunk": row["trunk"], "precision": row["precision"],
             "actor_cores": speed * row["core_s_per_frame"]}
            for speed in learner_fps for row in rows if row["trunk"] != "-"]


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    rows = measure(args)
    speedups = {}
    for row in rows:  # over the faster fp32 layout: what fp32 actors run (they measure it too)
        fp32 = [r["core_s_per_frame"] for r in rows if r["trunk"] == row["trunk"] and r["precision"].startswith("fp32")]
        speedups[id(row)] = min(fp32) / row["core_s_per_frame"] if fp32 else 1.0
    table = [{**{k: v for k, v in row.items() if k not in ("core", "cpu")}, "vs_fp32": speedups[id(row)]}
             for row in rows]
    fleet = fleet_rows(rows, args.learner_fps)
    title = f"fleet: {args.game}, {args.envs} envs per actor, one core ({rows[0]['cpu']})"
    report(title, table, out=None)
    report("fleet: actor cores per learner speed", fleet, out=None)
    if args.out:
        write_json(title, table + fleet, args.out)
    return rows


if __name__ == "__main__":
    main()
