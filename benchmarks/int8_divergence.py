"""``python -m benchmarks.int8_divergence RUN_DIR``: where an int8 copy of a trained policy
diverges from it, recipe by recipe.

For each checkpoint of a run of a stochastic policy (PPO, SAC) on a gymnasium env, the fp32
policy plays ``--rollouts + 1`` rollouts of ``--steps`` steps. Each recipe's copy is calibrated
on rollout ``k`` (as a push calibrates on the last rollout) and measured on rollout
``k + 1``, which it never saw, with the exact ``KL(mu || pi)`` of
:func:`actorq.quant.policy_divergence`: the mean over the held-out steps and the largest
step. A second measurement takes the same copy to states its policy did not visit: those of
the run's last checkpoint (a policy that has learned to go further, as the actors get to
between two calibrations when they reach a new gait); for the last checkpoint itself, the
first checkpoint's. What a static copy clips there, a dynamic one does not.

The recipes, each one change from the one before:

- ``static 7-bit, 512 with replacement``: the int8 static recipe before this measurement
  (activations that feed an int8 ``Linear`` on 7 bits, 512 observations drawn with replacement);
- ``static 7-bit, whole rollout``: calibrated on every step of the last rollout, once each;
- ``static 8-bit, whole rollout``: those activations on 8 bits (where the kernel sums them
  exactly; forced here, to show its share);
- ``static, every layer int8``: the first and the last ``Linear`` in int8 too;
- ``dynamic, every layer int8``: ``quant.format=int8_dynamic``;
- ``dynamic, fp32 ends``: the default, ``quant.bits=8`` (activation ranges per forward).

Usage::

    python -m benchmarks.int8_divergence RUN_DIR [--checkpoints frames=100352.ckpt ...]
        [--rollouts 5] [--steps 512] [--seed 0] [--out bench-results/int8_divergence.json]
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import actorq
from actorq.quant import QuantizedNetwork, QuantSpec, _ao, policy_divergence

STATIC = QuantSpec(bits=8, mode="static")
DYNAMIC = QuantSpec(bits=8, mode="dynamic")


def _with_replacement(observations: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return observations[torch.randint(len(observations), (512,), generator=generator)]


def _whole(observations: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return observations


# name -> (spec, activations that feed an int8 Linear on 7 bits, calibration draw)
RECIPES: dict[str, tuple[QuantSpec, bool, Callable]] = {
    "static 7-bit, 512 with replacement": (STATIC, True, _with_replacement),
    "static 7-bit, whole rollout": (STATIC, True, _whole),
    "static 8-bit, whole rollout": (STATIC, False, _whole),
    "static, every layer int8": (QuantSpec(bits=8, mode="static", format="int8_static"), False, _whole),
    "dynamic, every layer int8": (QuantSpec(bits=8, mode="dynamic", format="int8_dynamic"), False, _whole),
    "dynamic, fp32 ends (default)": (DYNAMIC, False, _whole),
}


@torch.no_grad()
def rollouts(policy: torch.nn.Module, env_name: str, count: int, steps: int, seed: int) -> list[torch.Tensor]:
    """``count`` consecutive rollouts of ``steps`` observations of ``policy``'s own sampling."""
    env = gym.make(env_name)
    observation, _ = env.reset(seed=seed)
    torch.manual_seed(seed)
    out = []
    for _ in range(count):
        rows = []
        for _ in range(steps):
            rows.append(observation)
            action = policy.sample(torch.as_tensor(observation, dtype=torch.float32).unsqueeze(0))[0].numpy()
            if isinstance(env.action_space, gym.spaces.Box):
                action = np.clip(action, env.action_space.low, env.action_space.high)
            observation, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                observation, _ = env.reset()
        out.append(torch.as_tensor(np.array(rows), dtype=torch.float32))
    return out


def copy_of(policy: torch.nn.Module, spec: QuantSpec, reduced: bool, calibration: torch.Tensor) -> QuantizedNetwork:
    """``policy`` at ``spec``, with 7-bit activation inputs if ``reduced``."""
    measured = _ao.saturates_full_range
    _ao.saturates_full_range = lambda engine: reduced
    try:
        return QuantizedNetwork.from_network(policy, spec, calibration)
    finally:
        _ao.saturates_full_range = measured


def measure(run_dir: Path, checkpoint: str, other_states: torch.Tensor | None, rollout_count: int, steps: int,
            seed: int) -> dict:
    """Every recipe's KL on held-out rollouts of ``checkpoint`` (and on ``other_states``)."""
    agent = actorq.load(run_dir, ckpt=checkpoint)
    policy = agent.network.eval()
    data = rollouts(policy, agent.config.env.name, rollout_count + 1, steps, seed)
    generator = torch.Generator().manual_seed(seed)
    entropy = float(policy.entropy(data[0][:1]).mean()) if hasattr(policy, "entropy") else float("nan")
    row: dict = {"checkpoint": checkpoint, "entropy": entropy}
    for name, (spec, reduced, draw) in RECIPES.items():
        held_out, elsewhere = [], []
        for calibration, following in zip(data[:-1], data[1:]):
            copy = copy_of(policy, spec, reduced, draw(calibration, generator))
            held_out.append(policy_divergence(policy, copy, following, agent.spec))
            if other_states is not None:
                elsewhere.append(policy_divergence(policy, copy, other_states, agent.spec))
        row[name] = {
            "kl": float(np.mean([d["quant/kl"] for d in held_out])),
            "kl_max": float(np.max([d["quant/kl_max"] for d in held_out])),
            **({"kl_other_states": float(np.mean([d["quant/kl"] for d in elsewhere])),
                "kl_other_states_max": float(np.max([d["quant/kl_max"] for d in elsewhere]))} if elsewhere else {}),
        }
    return row


def checkpoints_of(run_dir: Path) -> list[str]:
    """The run's periodic checkpoints in frame order, then ``last.ckpt``."""
    periodic = sorted((run_dir / "checkpoints").glob("frames=*.ckpt"), key=lambda p: int(p.stem.split("=")[1]))
    return [p.name for p in periodic] + ["last.ckpt"]


def print_table(rows: list[dict]) -> None:
    for row in rows:
        print(f"\n{row['checkpoint']} (policy entropy {row['entropy']:.2f})")
        print(f"  {'recipe':38s} {'KL held-out':>12s} {'largest step':>13s} {'KL elsewhere':>13s} {'largest':>9s}")
        for name in RECIPES:
            cell = row[name]
            other = (f"{cell['kl_other_states']:13.5f} {cell['kl_other_states_max']:9.3f}"
                     if "kl_other_states" in cell else "")
            print(f"  {name:38s} {cell['kl']:12.5f} {cell['kl_max']:13.4f} {other}")


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--checkpoints", nargs="*", help="checkpoint names (default: every one of the run)")
    parser.add_argument("--rollouts", type=int, default=5, help="held-out rollouts per checkpoint")
    parser.add_argument("--steps", type=int, default=512, help="steps per rollout (the experiment's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench-results/int8_divergence.json"))
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    names = args.checkpoints or checkpoints_of(args.run_dir)
    everything = checkpoints_of(args.run_dir)
    rows = []
    for name in names:
        other = everything[-1] if name != everything[-1] else everything[0]
        agent = actorq.load(args.run_dir, ckpt=other)
        states = torch.cat(rollouts(agent.network.eval(), agent.config.env.name, 1, args.steps, args.seed + 1))
        rows.append(measure(args.run_dir, name, states, args.rollouts, args.steps, args.seed))
    print_table(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"run_dir": str(args.run_dir), "rows": rows}, indent=1))
    print(f"\nwrote {args.out}")
    return rows


if __name__ == "__main__":
    main()
