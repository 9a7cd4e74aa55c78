"""``actorq bench recipes``: greedy returns of one trained policy under each int8 recipe.

A quantization recipe is a function of a trained fp32 network, so each reference experiment is
trained once per seed (fp32 actors), and every recipe then quantizes that very network,
calibrated on the same replay sample (``replay.observations``, as a push does), and plays
the same greedy episodes (the evaluation env's seed, ``seed + 10000``, as
:class:`~actorq.callbacks.evaluation.Evaluation` uses). A recipe passes where its return is
within 5% of the fp32 network's (``eval/return_mean_quant`` vs ``eval/return_mean``).

Usage (``tests/integration/test_bench_smoke.py`` runs the quick form)::

    actorq bench recipes [--experiments ...] [--seeds 0 1 2] [--episodes 10]
        [--runs-dir DIR] [--quick] [--out FILE.json]

With ``--runs-dir``, each trained network is kept there (``trained.pt``) and reused by the
next invocation, so recipes can be compared again without training again.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from actorq.bench._table import report
from actorq.bench.learning import EXPERIMENT_OVERRIDES, QUICK_OVERRIDES, REFERENCE
from actorq.callbacks.evaluation import greedy
from actorq.envs import EnvSpec, make_env, rollout_return
from actorq.quant import QuantizedNetwork, QuantSpec, action_error
from actorq.util.arguments import as_options

RECIPES = {
    "int8_static": QuantSpec(bits=8, mode="static", format="int8_static"),  # every layer int8 (the previous default)
    "int8_static_fp32_ends": QuantSpec(bits=8, mode="static"),  # the default: first and last layer fp32
    "int8_dynamic": QuantSpec(bits=8, mode="dynamic"),
}
EVAL_SEED_OFFSET = 10_000  # Evaluation's default seed_offset
TOLERANCE = 0.05
ERROR_SAMPLES = 4096  # replay observations the action error is measured on


def trained(experiment: str, seed: int, run_dir: Path, extra: Sequence[str]) -> dict:
    """The fp32 policy of one run with its calibration and error samples (trained or reloaded)."""
    saved = run_dir / "trained.pt"
    if saved.is_file():  # tensors and plain values only: loads without running pickled code
        return _with_network(torch.load(saved, weights_only=True))
    overrides = [f"+experiment={experiment}", "quant.bits=32", f"seed={seed}", f"run_dir={run_dir}",
                 "callbacks=no_checkpoint", *EXPERIMENT_OVERRIDES.get(experiment, ()), *extra]
    with initialize_config_module("actorq.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    from actorq.train import train  # the training stack only when a run is needed

    summary, objects = train(cfg)
    learner, replay = objects["learner"], objects["experience"].replay
    calibration, observations = replay.observation_sets(QuantSpec(bits=8).calibration_samples, ERROR_SAMPLES)
    result = {
        "algo": OmegaConf.to_container(cfg.algo, resolve=True),
        "learner_state": {name: tensor.cpu() for name, tensor in learner.state_dict().items()},
        "calibration": calibration.clone(),  # the error is measured on observations not calibrated on
        "observations": observations.clone(),
        "env": cfg.env.name, "library": cfg.env.get("library"), "seed": seed,
        "discrete": learner.spec.discrete, "final_return": summary["final_return"],
    }
    torch.save(result, saved)
    return _with_network(result)


def _with_network(run: dict) -> dict:
    """``run`` plus ``network``: the learner's fp32 policy, rebuilt from its config and state."""
    from actorq.run.build import build_learner

    env = make_env(run["env"], seed=run["seed"], library=run["library"])
    try:
        learner = build_learner(OmegaConf.create(run["algo"]), EnvSpec.from_env(env), run["env"])
    finally:
        env.close()
    learner.load_state_dict(run["learner_state"])
    return {**run, "network": learner.behaviour_network.cpu().eval()}


def greedy_return(run: dict, network: torch.nn.Module, episodes: int) -> float:
    env = make_env(run["env"], seed=run["seed"] + EVAL_SEED_OFFSET, library=run["library"])
    try:
        return statistics.fmean(rollout_return(env, greedy(network, run["discrete"]), episodes))
    finally:
        env.close()


def compare(experiment: str, run: dict, recipes: Sequence[str], episodes: int) -> list[dict]:
    """One row per recipe (fp32 first): greedy return, gap to fp32, action error."""
    network = run["network"]
    fp32 = greedy_return(run, network, episodes)
    rows = [{"experiment": experiment, "seed": run["seed"], "recipe": "fp32", "return": fp32,
             "gap_pct": 0.0, "within_5pct": True, "action_error": 0.0}]
    for name in recipes:
        quantized = QuantizedNetwork.from_network(network, RECIPES[name], run["calibration"])
        value = greedy_return(run, quantized, episodes)
        gap = abs(value - fp32) / max(abs(fp32), 1e-9)
        rows.append({
            "experiment": experiment, "seed": run["seed"], "recipe": name, "return": value,
            "gap_pct": 100 * gap, "within_5pct": gap <= TOLERANCE,
            "action_error": action_error(network, quantized, run["observations"], run["discrete"]),
        })
    return rows


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="actorq bench recipes", description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="+", default=[*REFERENCE[:2], "ddpg_pendulum", *REFERENCE[2:]])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    parser.add_argument("--episodes", type=int, default=10, help="greedy episodes per recipe (Evaluation's default)")
    parser.add_argument("--quick", action="store_true", help="tiny budgets (smoke test, no learning)")
    parser.add_argument("--runs-dir", default=None, help="where runs and trained networks go (default: a temporary folder)")
    parser.add_argument("--out", default="bench-results/recipes.json", help="JSON output ('' for none)")
    args = parser.parse_args(as_options(argv, parser))
    if args.quick:
        args.episodes = min(args.episodes, 1)
    return args


def main(argv: Sequence[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    extra = QUICK_OVERRIDES if args.quick else ()
    runs_dir = Path(args.runs_dir or tempfile.mkdtemp(prefix="actorq-recipes-"))
    rows = []
    for experiment in args.experiments:
        for seed in args.seeds:
            run = trained(experiment, seed, runs_dir / f"{experiment}-seed{seed}", extra)
            rows.extend(compare(experiment, run, args.recipes, args.episodes))
    report("int8 recipes: greedy return of the same trained fp32 network, quantized", rows, args.out or None)
    for name in args.recipes:
        mine = [row for row in rows if row["recipe"] == name]
        print(f"{name}: within 5% of fp32 in {sum(row['within_5pct'] for row in mine)} of {len(mine)} runs")
    print(f"runs: {runs_dir}")
    return rows


if __name__ == "__main__":
    main()
