"""``python -m benchmarks.results``: the results table against Stable-Baselines3.

A fixed suite of cells, one ``(task, implementation, seed)`` each: actorq with fp32 actors,
actorq with int8 actors and Stable-Baselines3 (the same algorithm, hyperparameters and frame
budget; SB3 has no D4PG, so the D4PG tasks have no peer). Cells run one at a time, task by
task, seed by seed, the three implementations in turn; each finished cell writes
``cells/NAME/cell.json`` (its done marker), so a rerun skips it and a cell cut off midway is
run again from scratch. ``results.json``, ``results.md`` and the plots are rebuilt from the
finished cells after every cell (``--summarize-only`` rebuilds them alone). Before its cells,
each task's actors are probed once for the regime map's prediction of the int8 rows
(:mod:`benchmarks.results_regime`).

Usage (``tests/integration/test_bench_results.py`` runs the quick form; docs/results.md)::

    python -m benchmarks.results [--tasks ...] [--seeds 0 1 2] [--impls ...]
                                   [--out-dir bench-results/results] [--budget-scale X | --quick]
                                   [--max-cells N] [--ours KEY=VALUE ...] [--summarize-only]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from actorq.util.atomic import write_text_atomically
from benchmarks import results_regime, results_table
from benchmarks.results_machine import machine

IMPLEMENTATIONS = ("actorq-fp32", "actorq-int8", "sb3")
PEER = "sb3"
INSTALL_PEER = "pip install 'actorq[bench]'"


@dataclass(frozen=True)
class Task:
    """One task of the suite: our experiment with its overrides, and SB3's algorithm with the
    same settings in its own names (``peer`` is None where SB3 has no such algorithm)."""

    name: str
    env_id: str
    frames: int
    ours: tuple[str, ...]
    peer: str | None = None
    peer_kwargs: dict = field(default_factory=dict)
    eval_every: int = 5000
    eval_episodes: int = 10
    eval_deterministic: bool = True  # False: sampled actions on both sides (RL Zoo's Atari evaluation)
    atari_game: str | None = None  # the peer's evaluation plays in our Atari env of this game
    estimate_s: float = 600.0  # per cell, for the ETA until cells of the task have finished (docs/results.md#budget)

    def scaled(self, scale: float) -> int:
        return max(1, int(self.frames * scale))


# RL Zoo (rl-baselines3-zoo, hyperparams/*.yml) for TD3, SAC and DQN; Acme's D4PG defaults
# (conf/algo/d4pg.yaml); docs/results.md lists each setting on both sides and its source.
# Acme's D4PGConfig (acme/agents/jax/d4pg/config.py): samples_per_insert 32 at batch 256 is
# 0.125 updates per frame; min_replay_size 1000; networks 256x3 policy, 512-512-256 critic.
ACME_D4PG = ("algo.actor_hidden=[256,256,256]", "algo.critic_hidden=[512,512,256]", "algo.actor_lr=1e-4",
             "algo.critic_lr=1e-4", "algo.batch_size=256", "algo.gamma=0.99", "algo.n_step=5",
             "algo.target_tau=1.0", "algo.target_update_period=100", "algo.exploration.start=0.3",
             "algo.update_to_data=0.125", "algo.learning_starts=1000", "actors.init_random_frames=1000",
             "replay.capacity=1000000")
SUITE = {
    "dqn_cartpole": Task(
        "dqn_cartpole", "CartPole-v1", 50_000,
        ours=("+experiment=dqn_cartpole", "algo.hidden=[256,256]", "algo.lr=2.3e-3", "algo.batch_size=64",
              "algo.gamma=0.99", "algo.n_step=1", "algo.double=false", "algo.max_grad_norm=10.0",
              "algo.final_lr_fraction=1.0", "algo.learning_starts=1000", "actors.init_random_frames=1000",
              "actors.frames_per_batch=256", "algo.update_to_data=0.5",
              "algo.target_tau=1.0", "algo.target_update_period=128",
              "algo.exploration.start=1.0", "algo.exploration.end=0.04", "algo.exploration.anneal_frames=8000",
              "replay.capacity=100000"),
        peer="DQN",
        peer_kwargs=dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
                         gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
                         exploration_fraction=0.16, exploration_final_eps=0.04,
                         policy_kwargs=dict(net_arch=[256, 256])),
        estimate_s=60.0,
    ),
    "td3_half_cheetah": Task(
        "td3_half_cheetah", "HalfCheetah-v5", 100_000,
        ours=("env=half_cheetah", "algo=td3", "algo.actor_hidden=[400,300]", "algo.critic_hidden=[400,300]",
              "algo.actor_lr=1e-3", "algo.critic_lr=1e-3", "algo.batch_size=256", "algo.gamma=0.99",
              "algo.target_tau=0.005", "algo.policy_delay=2", "algo.target_noise=0.2",
              "algo.target_noise_clip=0.5", "algo.exploration.start=0.1", "algo.update_to_data=1.0",
              "algo.learning_starts=10000", "actors.init_random_frames=10000", "replay.capacity=1000000"),
        peer="TD3",
        peer_kwargs=dict(learning_rate=1e-3, batch_size=256, buffer_size=1_000_000, learning_starts=10_000,
                         gamma=0.99, tau=0.005, train_freq=1, gradient_steps=1, policy_delay=2,
                         target_policy_noise=0.2, target_noise_clip=0.5, action_noise_std=0.1,
                         policy_kwargs=dict(net_arch=[400, 300])),
        eval_every=10_000, estimate_s=1320.0,
    ),
    "sac_half_cheetah": Task(
        "sac_half_cheetah", "HalfCheetah-v5", 100_000,
        ours=("env=half_cheetah", "algo=sac", "algo.actor_hidden=[256,256]", "algo.critic_hidden=[256,256]",
              "algo.actor_lr=3e-4", "algo.critic_lr=3e-4", "algo.alpha_lr=3e-4", "algo.init_alpha=1.0",
              "algo.batch_size=256", "algo.gamma=0.99", "algo.target_tau=0.005", "algo.update_to_data=1.0",
              "algo.learning_starts=10000", "actors.init_random_frames=10000", "replay.capacity=1000000"),
        peer="SAC",
        peer_kwargs=dict(learning_rate=3e-4, batch_size=256, buffer_size=1_000_000, learning_starts=10_000,
                         gamma=0.99, tau=0.005, train_freq=1, gradient_steps=1, ent_coef="auto",
                         policy_kwargs=dict(net_arch=[256, 256])),
        eval_every=10_000, estimate_s=1320.0,
    ),
    "d4pg_cheetah_run": Task(
        "d4pg_cheetah_run", "cheetah-run", 100_000,
        ours=("env=cheetah_run", "algo=d4pg", *ACME_D4PG),
        eval_every=10_000, estimate_s=480.0,
    ),
    "d4pg_walker_walk": Task(
        "d4pg_walker_walk", "walker-walk", 100_000,
        ours=("env=walker_walk", "algo=d4pg", *ACME_D4PG),
        eval_every=10_000, estimate_s=540.0,
    ),
    # RL Zoo's tuned PPO for CartPole-v1 (conf/experiment/ppo_cartpole.yaml); ReLU units on
    # both sides (actorq's trunks are ReLU). SB3 on DummyVecEnv: its 8 CartPoles step faster in
    # its own process than behind SubprocVecEnv's pipes (docs/results.md measures both).
    "ppo_cartpole": Task(
        "ppo_cartpole", "CartPole-v1", 100_000,
        ours=("+experiment=ppo_cartpole",),
        peer="PPO",
        peer_kwargs=dict(n_envs=8, vec_env="dummy", n_steps=32, batch_size=256, n_epochs=20, gae_lambda=0.8,
                         gamma=0.98, ent_coef=0.0, learning_rate="lin_1e-3", clip_range="lin_0.2",
                         policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn="relu")),
        eval_every=10_000, estimate_s=60.0,
    ),
    # RL Zoo's tuned PPO for HalfCheetah (conf/experiment/ppo_half_cheetah.yaml): one env,
    # observations normalized and rewards scaled (SB3: VecNormalize; ours: in the policy and the
    # learner). One env: SB3's DummyVecEnv (a process of its own would only add pipes).
    "ppo_half_cheetah": Task(
        "ppo_half_cheetah", "HalfCheetah-v5", 1_000_000,
        ours=("+experiment=ppo_half_cheetah",),
        peer="PPO",
        peer_kwargs=dict(n_envs=1, vec_env="dummy", normalize=True, n_steps=512, batch_size=64, n_epochs=20,
                         gamma=0.98, gae_lambda=0.92, learning_rate=2.0633e-05, ent_coef=0.000401762,
                         clip_range=0.1, max_grad_norm=0.8, vf_coef=0.58096,
                         policy_kwargs=dict(log_std_init=-2.0, ortho_init=False, activation_fn="relu",
                                            net_arch=dict(pi=[256, 256], vf=[256, 256]))),
        eval_every=50_000, estimate_s=1200.0,
    ),
    # CleanRL's ppo_atari settings (conf/experiment/ppo_breakout.yaml) on both sides, SB3 with
    # RL Zoo's Atari env (AtariWrapper, 4 frames stacked) and CnnPolicy (the Nature-CNN, one
    # trunk under the policy and the value, orthogonal init); our learner at trainer.precision
    # auto. Evaluation samples the policy (eval.deterministic=false) on whole games, raw score.
    "ppo_breakout": Task(
        "ppo_breakout", "BreakoutNoFrameskip-v4", 1_000_000,
        ours=("+experiment=ppo_breakout",),
        peer="PPO",
        peer_kwargs=dict(n_envs=8, vec_env="dummy", n_steps=128, batch_size=256, n_epochs=4, gamma=0.99,
                         gae_lambda=0.95, learning_rate="lin_2.5e-4", clip_range=0.1, ent_coef=0.01, vf_coef=0.5,
                         max_grad_norm=0.5),
        eval_every=250_000, eval_episodes=10, eval_deterministic=False, atari_game="breakout", estimate_s=4000.0,
    ),
}
ON_POLICY = results_regime.ON_POLICY  # no replay: no learning_starts to shorten in a quick budget
@dataclass(frozen=True)
class Budget:
    """A cell's frame budget and evaluation schedule, the same for every implementation."""

    frames: int
    eval_every: int
    eval_episodes: int
    learning_starts: int | None = None  # None: the task's own

    @classmethod
    def of(cls, task: Task, scale: float, quick: bool) -> Budget:
        if quick:
            return QUICK
        return cls(task.scaled(scale), max(1, int(task.eval_every * min(1.0, scale))), task.eval_episodes)


QUICK = Budget(frames=1024, eval_every=512, eval_episodes=2, learning_starts=256)


def cell_name(task: str, impl: str, seed: int) -> str:
    return f"{task}-{impl}-seed{seed}"


def plan(tasks: Sequence[str], impls: Sequence[str], seeds: Sequence[int]) -> list[tuple[str, str, int]]:
    """The cells in the order they run: task by task, seed by seed, implementations in turn
    (no peer for a task without one).

    Example:
        >>> plan(["dqn_cartpole", "d4pg_cheetah_run"], ["actorq-fp32", "sb3"], [0, 1])[:3]
        [('dqn_cartpole', 'actorq-fp32', 0), ('dqn_cartpole', 'sb3', 0), ('dqn_cartpole', 'actorq-fp32', 1)]
        >>> [impl for task, impl, seed in plan(["d4pg_cheetah_run"], ["actorq-fp32", "sb3"], [0])]
        ['actorq-fp32']
    """
    return [(task, impl, seed) for task in tasks for seed in seeds for impl in impls
            if impl != PEER or SUITE[task].peer is not None]


# --- one cell --------------------------------------------------------------------------


def run_cell(task: Task, impl: str, seed: int, budget: Budget, cell_dir: Path) -> dict:
    """Runs one cell in a fresh ``cell_dir`` and writes its ``cell.json`` last: the marker that
    it finished. Wall-clock counts everything the cell does (start-up and evaluations included,
    on both sides) but an int8 cell's second evaluation, of its actors' policy
    (``eval_quant_s``), which neither an fp32 cell nor SB3 runs."""
    if cell_dir.exists():  # a cell cut off midway: its partial outputs are not half-counted
        shutil.rmtree(cell_dir)
    cell_dir.mkdir(parents=True)
    load_start = os.getloadavg()
    started = time.perf_counter()
    if impl == PEER:
        from benchmarks.results_peer import run_peer

        result = run_peer(task, seed, budget)
    else:
        result = run_ours(task, 8 if impl == "actorq-int8" else 32, seed, budget, cell_dir / "run")
    elapsed = time.perf_counter() - started - result.get("eval_quant_s", 0.0)
    cell = {"task": task.name, "impl": impl, "seed": seed, "env": task.env_id,
            "budget": vars(budget),
            **result, "wall_clock_s": round(elapsed, 2),
            "machine": machine(load_start), "torch_threads": torch.get_num_threads()}
    write_text_atomically(cell_dir / "cell.json", json.dumps(cell, indent=2))
    return cell


def run_ours(task: Task, bits: int, seed: int, budget: Budget, run_dir: Path) -> dict:
    """One actorq run through ``train(cfg)``; its curve from its TensorBoard events (seconds
    from the first collected frame, as ``python -m actorq.report`` reads them)."""
    from hydra import compose, initialize_config_module

    from actorq.report import read_run
    from actorq.train import train

    overrides = [*task.ours, f"quant.bits={bits}", f"seed={seed}", f"run_dir={run_dir}",
                 f"actors.total_frames={budget.frames}", f"eval.every_frames={budget.eval_every}",
                 f"eval.episodes={budget.eval_episodes}", f"eval.deterministic={str(task.eval_deterministic).lower()}",
                 "callbacks=no_checkpoint", "~callbacks.carbon",
                 "trainer.enable_progress_bar=false"]
    if budget.learning_starts is not None and task.name not in ON_POLICY:
        overrides += [f"algo.learning_starts={budget.learning_starts}",
                      f"actors.init_random_frames={budget.learning_starts}"]
    with initialize_config_module("actorq.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    summary, _ = train(cfg)
    run = read_run(run_dir)
    return {"frames": summary["frames"], "final_return": summary["final_return"],
            "final_return_actors": summary["final_return_quant"], "actor_precision": summary["actor_precision"],
            "updates": summary["learner_steps"], "updates_per_s": summary["learner_updates_per_s"],
            "eval_quant_s": summary["eval_quant_s"],
            "curve": [{"frames": int(f), "wall_s": round(s, 2), "return": r} for s, f, r in run.evals],
            "overrides": overrides}


# --- the suite ---------------------------------------------------------------------------


def run_suite(cells: list[tuple[str, str, int]], budgets: dict[str, Budget], out_dir: Path,
              max_cells: int | None = None, quick: bool = False, suite: dict[str, Task] | None = None) -> None:
    """Probes the actors of each task with actorq cells for the regime map (unless stored; a
    minute at most each), then runs the unfinished
    cells in order (at most ``max_cells`` of them), one line each with the elapsed time and the
    ETA of the rest, and rebuilds the table after each. ``suite``: the tasks (default
    :data:`SUITE`; ``--ours`` adds overrides to our cells)."""
    suite = SUITE if suite is None else suite
    sitting = time.perf_counter()
    for task in dict.fromkeys(task for task, impl, _ in cells if impl != PEER):
        if not results_regime.probe_path(out_dir, task).is_file():
            print(f"{task}: probing the actors for the regime map (fp32, int8)", flush=True)
            rates = results_regime.probe(suite[task], out_dir, quick)["actor_fps"]
            print(f"{task}: actors alone {rates['fp32']:.0f} frames/s fp32, {rates['int8']:.0f} int8", flush=True)
    ran = 0
    for index, (task, impl, seed) in enumerate(cells):
        cell_dir = out_dir / "cells" / cell_name(task, impl, seed)
        if (cell_dir / "cell.json").is_file():
            print(f"[{index + 1}/{len(cells)}] {cell_dir.name}: done before, skipped", flush=True)
            continue
        if max_cells is not None and ran >= max_cells:
            print(f"stopped after {ran} cells (--max-cells); run again to go on", flush=True)
            return
        ran += 1
        print(f"[{index + 1}/{len(cells)}] {cell_dir.name}: running ({budgets[task].frames} frames)", flush=True)
        cell = run_cell(suite[task], impl, seed, budgets[task], cell_dir)
        eta = eta_s(cells[index + 1:], out_dir)
        print(f"[{index + 1}/{len(cells)}] {cell_dir.name}: return {cell['final_return']:.1f} in "
              f"{cell['wall_clock_s']:.0f} s; elapsed {time.perf_counter() - sitting:.0f} s, "
              f"ETA of the table {eta / 60:.0f} min", flush=True)
        results_table.summarize(out_dir)


def eta_s(remaining: list[tuple[str, str, int]], out_dir: Path) -> float:
    """Seconds the unfinished cells will take: each task's finished cells' mean wall-clock, or
    its estimate until one has finished."""
    finished = results_table.read_cells(out_dir)
    total = 0.0
    for task, impl, seed in remaining:
        if (out_dir / "cells" / cell_name(task, impl, seed) / "cell.json").is_file():
            continue
        times = [c["wall_clock_s"] for c in finished if c["task"] == task]
        total += sum(times) / len(times) if times else SUITE[task].estimate_s
    return total


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.results", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(SUITE), choices=list(SUITE))
    parser.add_argument("--impls", nargs="+", default=list(IMPLEMENTATIONS), choices=IMPLEMENTATIONS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out-dir", default="bench-results/results",
                        help="cells, results.json, results.md and plots go here")
    parser.add_argument("--budget-scale", type=float, default=1.0, help="multiplies every task's frame budget")
    parser.add_argument("--quick", action="store_true", help="tiny budgets (smoke test, no learning)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of the learning process, the same for ours and SB3 (our actor "
                             "workers run one thread each)")
    parser.add_argument("--max-cells", type=int, default=None,
                        help="run at most this many unfinished cells, then stop (a sitting of bounded length; 0: only "
                             "the tasks' regime probes)")
    parser.add_argument("--ours", nargs="+", default=[], metavar="KEY=VALUE",
                        help="overrides added to every actorq cell (an A/B of one setting: give it its own --out-dir)")
    parser.add_argument("--summarize-only", action="store_true", help="rebuild table and plots from finished cells")
    return parser.parse_args(argv)


def check_same_overrides(out_dir: Path, ours: Sequence[str]) -> None:
    """Records ``--ours`` in ``out_dir`` on its first sitting and exits if a later sitting
    gives others: one table never mixes cells run with different settings."""
    record = out_dir / "ours_overrides.json"
    if not record.is_file():
        write_text_atomically(record, json.dumps(list(ours)))
        return
    before = json.loads(record.read_text())
    if before != list(ours):
        print(f"benchmarks.results: {out_dir} holds cells run with --ours {' '.join(before) or '(none)'}; "
              f"give --ours {' '.join(ours) or '(none)'} its own --out-dir", file=sys.stderr)
        sys.exit(2)


def peer_installed() -> bool:
    return importlib.util.find_spec("stable_baselines3") is not None


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse_args(argv)
    out_dir = Path(args.out_dir)
    if not args.summarize_only:
        if PEER in args.impls and not peer_installed():
            print(f"benchmarks.results: Stable-Baselines3 (the peer) is not installed: {INSTALL_PEER}, "
                  "or leave it out with --impls actorq-fp32 actorq-int8", file=sys.stderr)
            sys.exit(2)
        if not 0 < args.budget_scale:
            print("benchmarks.results: --budget-scale must be > 0", file=sys.stderr)
            sys.exit(2)
        budgets = {t: Budget.of(SUITE[t], args.budget_scale, args.quick) for t in args.tasks}
        out_dir.mkdir(parents=True, exist_ok=True)
        check_same_overrides(out_dir, args.ours)
        suite = {name: replace(task, ours=(*task.ours, *args.ours)) for name, task in SUITE.items()}
        threads = torch.get_num_threads()
        torch.set_num_threads(args.threads)
        try:
            run_suite(plan(args.tasks, args.impls, args.seeds), budgets, out_dir, args.max_cells, args.quick, suite)
        finally:
            torch.set_num_threads(threads)
    document = results_table.summarize(out_dir)
    print(results_table.markdown(document))
    return document


if __name__ == "__main__":
    main()
