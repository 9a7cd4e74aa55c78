"""Networks built from an :class:`~actorq.envs.EnvSpec`: shapes are never typed in YAML.

Every policy is a plain ``nn.Sequential`` MLP ("trunk") followed by a small head, so the
quantizers in :mod:`actorq.quant` can find the ``nn.Linear`` layers they replace.

Example:
    >>> from actorq.envs import EnvSpec
    >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> actor = DeterministicActor(spec, hidden=(64, 64))
    >>> actor(torch.zeros(5, 3)).shape
    torch.Size([5, 1])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from actorq.envs import EnvSpec


def mlp(
    in_dim: int, hidden: Sequence[int], out_dim: int, layer_norm: bool = False
) -> nn.Sequential:
    """``Linear -> [LayerNorm] -> ReLU`` per hidden width, then a final ``Linear``."""
    layers: list[nn.Module] = []
    width = in_dim
    for size in hidden:
        layers.append(nn.Linear(width, size))
        if layer_norm:
            layers.append(nn.LayerNorm(size))
        layers.append(nn.ReLU())
        width = size
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)


class TanhScale(nn.Module):
    """Squashes to ``[-1, 1]`` with tanh, then maps onto the action bounds."""

    def __init__(self, low: Sequence[float], high: Sequence[float]):
        super().__init__()
        low_t = torch.as_tensor(low, dtype=torch.float32)
        high_t = torch.as_tensor(high, dtype=torch.float32)
        self.register_buffer("center", (high_t + low_t) / 2)
        self.register_buffer("half_range", (high_t - low_t) / 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.center + self.half_range * torch.tanh(x)


class DeterministicActor(nn.Module):
    """``obs -> action`` within the action bounds (DDPG, TD3, D4PG).

    Attributes:
        trunk: the MLP whose ``Linear`` layers quantization replaces.
        head: the tanh-and-rescale output layer (kept in full precision).
    """

    def __init__(self, spec: EnvSpec, hidden: Sequence[int]):
        super().__init__()
        if spec.discrete:
            raise ValueError("DeterministicActor needs a continuous action space")
        self.trunk = mlp(spec.obs_dim, hidden, spec.action_dim)
        self.head = TanhScale(spec.action_low, spec.action_high)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(observation))


class QNetwork(nn.Module):
    """``obs -> Q(obs, a)`` for every discrete action (DQN).

    Attributes:
        trunk: the MLP whose ``Linear`` layers quantization replaces.
        head: identity, so every policy has the same ``trunk``/``head`` shape.
    """

    def __init__(self, spec: EnvSpec, hidden: Sequence[int]):
        super().__init__()
        if not spec.discrete:
            raise ValueError("QNetwork needs a discrete action space")
        self.trunk = mlp(spec.obs_dim, hidden, spec.num_actions)
        self.head = nn.Identity()

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(observation))


class Critic(nn.Module):
    """``(obs, action) -> value``: one scalar, or ``out_dim`` logits for a distributional critic."""

    def __init__(
        self, spec: EnvSpec, hidden: Sequence[int], layer_norm: bool = False, out_dim: int = 1
    ):
        super().__init__()
        self.out_dim = out_dim
        self.net = mlp(spec.obs_dim + spec.action_dim, hidden, out_dim, layer_norm=layer_norm)

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        out = self.net(torch.cat([observation, action], dim=-1))
        return out.squeeze(-1) if self.out_dim == 1 else out
