"""Collector batches -> n-step transitions with their own bootstrap discount.

Each transition carries ``discount = gamma**k * (1 - terminated)``, where ``k <= n`` is the
number of rewards summed before the trajectory ended or the batch ran out, so learners
compute every target as ``reward + discount * value(next_observation)``.

Example:
    >>> from tensordict import TensorDict
    >>> T = 4
    >>> batch = TensorDict({
    ...     "observation": torch.arange(T, dtype=torch.float32).unsqueeze(-1),
    ...     "action": torch.zeros(T, 1),
    ...     "next": {"observation": torch.arange(1, T + 1, dtype=torch.float32).unsqueeze(-1),
    ...              "reward": torch.ones(T, 1),
    ...              "terminated": torch.zeros(T, 1, dtype=torch.bool),
    ...              "done": torch.zeros(T, 1, dtype=torch.bool)}}, batch_size=[T])
    >>> out = nstep_transitions(batch, n=2, gamma=0.5)
    >>> out["reward"].tolist(), out["discount"].tolist()
    ([1.5, 1.5, 1.5, 1.0], [0.25, 0.25, 0.25, 0.5])
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase


def nstep_transitions(batch: TensorDictBase, n: int, gamma: float) -> TensorDict:
    """Turns a collector batch ``[*envs, T]`` into flat n-step transitions ``[envs * T]``.

    Args:
        batch: steps in time order along the last batch dimension, with ``observation``,
            ``action`` and ``next`` holding ``observation``, ``reward``, ``terminated``, ``done``.
        n: number of rewards to sum (1 gives ordinary one-step transitions).
        gamma: discount per step.

    Returns:
        A TensorDict with ``observation``, ``action``, ``reward``, ``next_observation`` and
        ``discount``, one row per step of ``batch``.
    """
    if n < 1:
        raise ValueError(f"n-step must be >= 1, got {n}")
    steps = batch.reshape(-1, batch.shape[-1])  # [B, T]
    num_steps = steps.shape[-1]
    reward = steps["next", "reward"].reshape(steps.shape).float()
    done = steps["next", "done"].reshape(steps.shape)
    terminated = steps["next", "terminated"].reshape(steps.shape)

    start = torch.arange(num_steps).expand(steps.shape)
    last = start.clone()
    alive = torch.ones(steps.shape, dtype=torch.bool)
    total = torch.zeros(steps.shape)
    for k in range(n):
        index = start + k
        valid = alive & (index < num_steps)
        index = index.clamp(max=num_steps - 1)
        total += torch.where(valid, gamma**k * reward.gather(-1, index), 0.0)
        last = torch.where(valid, index, last)
        alive = valid & ~done.gather(-1, index)

    count = (last - start + 1).float()
    discount = gamma**count * (~terminated.gather(-1, last)).float()
    next_obs = steps["next", "observation"]
    rows = torch.arange(steps.shape[0]).unsqueeze(-1)
    return TensorDict(
        {
            "observation": steps["observation"].reshape(-1, *steps["observation"].shape[2:]),
            "action": steps["action"].reshape(-1, *steps["action"].shape[2:]),
            "reward": total.reshape(-1),
            "next_observation": next_obs[rows, last].reshape(-1, *next_obs.shape[2:]),
            "discount": discount.reshape(-1),
        },
        batch_size=[steps.numel()],
    )
