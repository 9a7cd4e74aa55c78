"""DQN (Mnih et al. 2015) with the double-DQN target (van Hasselt et al. 2016) as an option.

Example:
    >>> from actorq.envs import EnvSpec
    >>> from actorq.algos.base import Exploration
    >>> learner = DQN(EnvSpec(obs_dim=4, discrete=True, num_actions=2), Exploration(1.0, 0.05, 10_000))
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from actorq.algos.base import Exploration, adam, check_positive
from actorq.algos.off_policy import OffPolicyLearner
from actorq.envs import EnvSpec
from actorq.algos.conv import PixelQNetwork
from actorq.algos.networks import QNetwork
from actorq.algos.batches import Sample


class DQN(OffPolicyLearner):
    """Deep Q-learning with epsilon-greedy actors.

    Args:
        spec: a discrete-action environment spec.
        exploration: epsilon schedule for the actors.
        hidden: widths of the Q-network's hidden layers.
        lr: Adam learning rate.
        double: use the online network to pick the next action (double DQN).
        max_grad_norm: gradient clipping threshold (0 disables).
        pixel_trunk: for an env that shows frames, the Q-network's convolutional trunk:
            ``"nature"`` (the DQN paper's) or ``"impala"`` (:mod:`actorq.algos.conv`);
            ``hidden`` is then unused.
        **kwargs: :class:`~actorq.algos.off_policy.OffPolicyLearner` arguments.
    """

    action_space = "discrete"

    def __init__(
        self,
        spec: EnvSpec,
        exploration: Exploration,
        hidden: Sequence[int] = (256, 256),
        lr: float = 1e-3,
        double: bool = True,
        max_grad_norm: float = 10.0,
        pixel_trunk: str = "nature",
        **kwargs,
    ):
        super().__init__(spec, exploration, **kwargs)
        check_positive(lr=lr)
        if not max(exploration.start, exploration.end) <= 1:
            raise ValueError(f"epsilon (exploration.start/end) must be in [0, 1], got "
                             f"{exploration.start}/{exploration.end}")
        if max_grad_norm < 0:
            raise ValueError(f"max_grad_norm must be >= 0 (0 disables clipping), got {max_grad_norm}")
        self.q_network = (PixelQNetwork(pixel_trunk, spec.frame_shape, spec.num_actions) if spec.pixels
                          else QNetwork(spec, hidden))
        self.q_target = copy.deepcopy(self.q_network).requires_grad_(False)
        self.lr = lr
        self.double = double
        self.max_grad_norm = max_grad_norm

    @property
    def behaviour_network(self) -> nn.Module:
        return self.q_network

    def target_pairs(self):
        return [(self.q_target, self.q_network)]

    def make_optimizers(self):
        return [adam(self.q_network.parameters(), lr=self.lr)]

    def td_target(self, batch) -> torch.Tensor:
        """``r + discount * Q_target(s', a*)``, with ``a*`` from the online net if double."""
        with torch.no_grad():
            next_q = self.q_target(batch["next_observation"])
            if self.double:
                best = self.q_network(batch["next_observation"]).argmax(-1, keepdim=True)
            else:
                best = next_q.argmax(-1, keepdim=True)
            return batch["reward"] + batch["discount"] * next_q.gather(-1, best).squeeze(-1)

    def update(self, sample: Sample) -> dict[str, torch.Tensor]:
        batch = sample.batch
        action = batch["action"].long().reshape(-1, 1)
        q_value = self.q_network(batch["observation"]).gather(-1, action).squeeze(-1)
        target = self.td_target(batch)
        loss_value = (sample.weights * F.smooth_l1_loss(q_value, target, reduction="none")).mean()

        self.optimize(self.optimizers(), loss_value, self.max_grad_norm)
        self.feed_priorities(sample, q_value - target)
        return {"loss_value": loss_value.detach(), "q_mean": q_value.detach().mean()}
