"""DDPG (Lillicrap et al. 2016): a deterministic actor trained through a learned critic.

TD3 and D4PG subclass this file's :class:`DDPG`; each overrides only what its paper changes.

Example:
    >>> from actorq.envs import EnvSpec
    >>> from actorq.algos.base import Exploration
    >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> learner = DDPG(spec, Exploration(0.1))
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from actorq.algos.base import Exploration, OffPolicyLearner
from actorq.envs import EnvSpec
from actorq.networks import Critic, DeterministicActor
from actorq.replay.base import Sample


class DDPG(OffPolicyLearner):
    """Deterministic policy gradient with one critic and soft-updated target networks.

    Args:
        spec: a continuous-action environment spec.
        exploration: Gaussian sigma (as a fraction of the half action range) for the actors.
        actor_hidden: hidden widths of the policy MLP.
        critic_hidden: hidden widths of the critic MLP.
        critic_layer_norm: layer-normalise the critic's hidden layers.
        actor_lr: Adam learning rate of the policy.
        critic_lr: Adam learning rate of the critic.
        **kwargs: :class:`~actorq.algos.base.OffPolicyLearner` arguments.
    """

    num_critics = 1

    def __init__(
        self,
        spec: EnvSpec,
        exploration: Exploration,
        actor_hidden: Sequence[int] = (256, 256),
        critic_hidden: Sequence[int] = (256, 256),
        critic_layer_norm: bool = False,
        actor_lr: float = 1e-3,
        critic_lr: float = 1e-3,
        **kwargs,
    ):
        super().__init__(spec, exploration, **kwargs)
        self.actor = DeterministicActor(spec, actor_hidden)
        self.critics = nn.ModuleList(
            self.make_critic(spec, critic_hidden, critic_layer_norm) for _ in range(self.num_critics)
        )
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critics_target = copy.deepcopy(self.critics).requires_grad_(False)
        self.actor_lr = actor_lr
        self.critic_lr = critic_lr

    def make_critic(self, spec: EnvSpec, hidden: Sequence[int], layer_norm: bool) -> nn.Module:
        return Critic(spec, hidden, layer_norm=layer_norm)

    @property
    def behaviour_network(self) -> nn.Module:
        return self.actor

    def target_pairs(self):
        return [(self.actor_target, self.actor), (self.critics_target, self.critics)]

    def configure_optimizers(self):
        return [
            torch.optim.Adam(self.actor.parameters(), lr=self.actor_lr),
            torch.optim.Adam(self.critics.parameters(), lr=self.critic_lr),
        ]

    # --- the paper's pieces; subclasses override these ------------------------------

    def target_action(self, next_observation: torch.Tensor) -> torch.Tensor:
        return self.actor_target(next_observation)

    def td_target(self, batch) -> torch.Tensor:
        """``y = r + discount * min_i Q'_i(s', mu'(s'))`` (one critic for DDPG)."""
        with torch.no_grad():
            next_action = self.target_action(batch["next_observation"])
            next_q = torch.stack([q(batch["next_observation"], next_action) for q in self.critics_target])
            return batch["reward"] + batch["discount"] * next_q.min(dim=0).values

    def critic_loss(self, sample: Sample) -> tuple[torch.Tensor, torch.Tensor]:
        """Importance-weighted squared TD error summed over critics, and the first TD error."""
        batch = sample.batch
        target = self.td_target(batch)
        td_errors = [q(batch["observation"], batch["action"]) - target for q in self.critics]
        loss = sum((sample.weights * td.pow(2)).mean() for td in td_errors)
        return loss, td_errors[0]

    def actor_loss(self, observation: torch.Tensor) -> torch.Tensor:
        """``-Q_1(s, mu(s))``: ascend the first critic."""
        return -self.critics[0](observation, self.actor(observation)).mean()

    def should_update_actor(self) -> bool:
        return True

    # --- one update -----------------------------------------------------------------

    def update(self, sample: Sample) -> dict[str, torch.Tensor]:
        actor_optimizer, critic_optimizer = self.optimizers()
        loss_value, td_error = self.critic_loss(sample)
        critic_optimizer.zero_grad()
        self.manual_backward(loss_value)
        critic_optimizer.step()
        self.feed_priorities(sample, td_error)
        metrics = {"loss_value": loss_value.detach(), "td_error": td_error.detach().abs().mean()}

        if self.should_update_actor():
            loss_actor = self.actor_loss(sample.batch["observation"])
            actor_optimizer.zero_grad()
            self.manual_backward(loss_actor)
            actor_optimizer.step()
            metrics["loss_actor"] = loss_actor.detach()
        return metrics
