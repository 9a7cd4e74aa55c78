"""``python -m benchmarks.heavy_tail``: PPO on an env with heavy-tailed step times, actorq's
asynchronous and lock-step collection against Stable-Baselines3's ``SubprocVecEnv``.

The env is ``heavy-tail-cartpole`` (:mod:`actorq.bench.heavy_tail`): CartPole-v1 whose steps
sleep 3 ms, and 100 ms with probability 0.01. A lock-step vectorized env waits at every step
for its slowest env, so with 16 envs about 15% of its steps take 100 ms; actors that collect
asynchronously wait only for their own env. Every implementation runs PPO with the
``ppo_cartpole`` experiment's hyperparameters (RL Zoo's), the same number of envs, the same
frames, the same updates per frame (20 epochs of 256-step minibatches per 512 frames):

- ``actorq-async-gather``: ``actors.collection=async actors.gather=ENVS``, one env per worker,
  32-step rollouts per worker, the first of every worker's taken as one batch (the lock-step
  round's shape, without waiting for the slowest worker or for the learner);
- ``actorq-async``: ``actors.collection=async``, one env per worker, ``32 x ENVS``-step
  rollouts per worker, each a batch (V-trace and the decoupled correction,
  ``docs/algorithms/ppo.md``);
- ``actorq-lockstep``: rounds of 32 steps of every worker's env (512 frames);
- ``sb3-subproc``: ``PPO(n_steps=32)`` on ``SubprocVecEnv`` of the envs (one process each).

Frames/s is frames over the wall clock of training (ours: the run's fit, actors' start-up
included; SB3's: the vec env's creation and ``learn()``), with no evaluation in it. The return
at budget is the mean return of the training episodes that ended in the last 10% of the
frames (the policy as it acted, for every implementation alike).

Usage::

    python -m benchmarks.heavy_tail [--envs 16] [--frames 50000] [--seeds 0] [--impls ...]
                                    [--bits 32] [--out bench-results/heavy_tail.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from actorq.util.atomic import write_text_atomically
from benchmarks.results_machine import machine

ENV = "heavy-tail-cartpole"
IMPLEMENTATIONS = ("actorq-async-gather", "actorq-async", "actorq-lockstep", "sb3-subproc")
STEPS_PER_ENV = 32  # ppo_cartpole's rollout per env (RL Zoo's n_steps)
LAST_FRACTION = 0.1


def ours(impl: str, envs: int, frames: int, seed: int, bits: int, run_dir: Path) -> dict:
    """One ``python -m actorq`` run; frames/s and the late training episodes' mean return."""
    asynchronous, gather = impl.startswith("actorq-async"), impl == "actorq-async-gather"
    steps = envs * STEPS_PER_ENV if asynchronous and not gather else STEPS_PER_ENV
    overrides = [
        "+experiment=ppo_cartpole", f"env.name={ENV}", "env.library=heavy_tail", "env.module=[actorq.bench.heavy_tail]",
        f"actors.collection={'async' if asynchronous else 'lockstep'}", f"actors.num_workers={envs}",
        "actors.envs_per_worker=1", f"actors.frames_per_batch={steps}", f"actors.gather={envs if gather else 1}",
        f"actors.total_frames={frames}", f"seed={seed}", f"quant.bits={bits}", "~callbacks.evaluation",
        "~callbacks.carbon", "callbacks=no_checkpoint", "trainer.enable_progress_bar=false", f"run_dir={run_dir}",
    ]
    result = subprocess.run([sys.executable, "-m", "actorq", *overrides], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{impl} seed {seed} failed:\n{result.stderr[-3000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"frames": summary["frames"], "wall_s": summary["wall_clock_s"],
            "frames_per_s": summary["frames"] / summary["wall_clock_s"],
            "late_return": late_return(episode_returns(run_dir / "tb"), summary["frames"]),
            "policy_lag_max": (summary.get("behaviour_correction") or {}).get("policy_lag"),
            "kl_behaviour": (summary.get("behaviour_correction") or {}).get("kl_behaviour"),
            "fallback_share": ((summary.get("fidelity") or {}).get("fallback") or {}).get("mean"),
            "updates": summary["learner_steps"]}


def episode_returns(tb_dir: Path) -> list[tuple[int, float]]:
    """``(frames, mean return of the episodes that ended in that batch)`` from TensorBoard."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points = []
    for path in sorted(tb_dir.iterdir()):
        events = EventAccumulator(str(path))
        events.Reload()
        if "collect/episode_return" in events.Tags()["scalars"]:
            points += [(event.step, event.value) for event in events.Scalars("collect/episode_return")]
    return points


def late_return(points: list[tuple[int, float]], frames: int) -> float | None:
    late = [value for step, value in points if step >= (1 - LAST_FRACTION) * frames]
    return statistics.fmean(late) if late else None


def sb3(envs: int, frames: int, seed: int) -> dict:
    """SB3's PPO with ppo_cartpole's settings on a ``SubprocVecEnv`` of ``envs`` envs."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv

    from actorq.bench.heavy_tail import HeavyTailCartPole

    class Episodes(BaseCallback):
        def __init__(self):
            super().__init__()
            self.points: list[tuple[int, float]] = []

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.points.append((self.num_timesteps, float(info["episode"]["r"])))
            return True

    def linear(start: float):
        return lambda remaining: remaining * start

    started = time.perf_counter()
    vec_env = make_vec_env(HeavyTailCartPole, n_envs=envs, seed=seed, vec_env_cls=SubprocVecEnv)
    model = PPO("MlpPolicy", vec_env, n_steps=STEPS_PER_ENV, batch_size=256, n_epochs=20, gae_lambda=0.8, gamma=0.98,
                ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed, device="cpu",
                policy_kwargs={"activation_fn": torch.nn.ReLU, "net_arch": {"pi": [64, 64], "vf": [64, 64]}})
    episodes = Episodes()
    model.learn(total_timesteps=frames, callback=episodes)
    wall = time.perf_counter() - started
    vec_env.close()
    return {"frames": int(model.num_timesteps), "wall_s": round(wall, 2), "frames_per_s": model.num_timesteps / wall,
            "late_return": late_return(episodes.points, model.num_timesteps), "policy_lag_max": None,
            "kl_behaviour": None, "fallback_share": None,
            "updates": int(model._n_updates)}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.heavy_tail", description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--frames", type=int, default=50_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--impls", nargs="+", default=list(IMPLEMENTATIONS), choices=IMPLEMENTATIONS)
    parser.add_argument("--bits", type=int, default=32, help="our actors' precision (quant.bits)")
    parser.add_argument("--out", type=Path, default=Path("bench-results/heavy_tail.json"))
    args = parser.parse_args(argv)
    load = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="actorq-heavy-tail-") as scratch:
        for seed in args.seeds:
            for impl in args.impls:
                run_dir = Path(scratch) / f"{impl}-{seed}"
                row = (sb3(args.envs, args.frames, seed) if impl == "sb3-subproc"
                       else ours(impl, args.envs, args.frames, seed, args.bits, run_dir))
                rows.append({"impl": impl, "seed": seed, "envs": args.envs, **row})
                print(f"{impl:16} seed {seed}: {row['frames_per_s']:7.0f} frames/s, late return "
                      f"{row['late_return'] if row['late_return'] is None else round(row['late_return'], 1)}, "
                      f"{row['updates']} updates, {row['wall_s']:.0f} s, lag {row['policy_lag_max']}, "
                      f"kl_behaviour {row['kl_behaviour']}, fallbacks {row['fallback_share']}", flush=True)
    table = summarize(rows)
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(args.out, json.dumps({"env": ENV, "rows": rows, "machine": machine(load)}, indent=1))
    return rows


def summarize(rows: list[dict]) -> str:
    """Per implementation: mean frames/s, its ratio to SB3's, the late returns."""
    by_impl: dict[str, list[dict]] = {}
    for row in rows:
        by_impl.setdefault(row["impl"], []).append(row)
    peer = statistics.fmean(r["frames_per_s"] for r in by_impl["sb3-subproc"]) if "sb3-subproc" in by_impl else None
    lines = ["| implementation | envs | frames/s | vs sb3-subproc | late return (per seed) |", "|---|---|---|---|---|"]
    for impl, group in by_impl.items():
        rate = statistics.fmean(r["frames_per_s"] for r in group)
        ratio = f"{rate / peer:.2f}x" if peer else "-"
        returns = ", ".join("-" if r["late_return"] is None else f"{r['late_return']:.0f}" for r in group)
        lines.append(f"| {impl} | {group[0]['envs']} | {rate:.0f} | {ratio} | {returns} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
