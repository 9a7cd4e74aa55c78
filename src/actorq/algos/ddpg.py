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

from actorq.algos.actor_critic import ActorCriticLearner
from actorq.algos.base import Exploration, adam
from actorq.envs import EnvSpec
from actorq.algos.networks import DeterministicActor
from actorq.algos.batches import Sample


class DDPG(ActorCriticLearner):
    """Deterministic policy gradient with one critic and soft-updated target networks.

    Args:
        spec: a continuous-action environment spec.
        exploration: Gaussian sigma (as a fraction of the half action range) for the actors.
        **kwargs: :class:`~actorq.algos.actor_critic.ActorCriticLearner` arguments
            (``actor_hidden``, ``critic_hidden``, ``critic_layer_norm``, learning rates, ...).
    """

    num_critics = 1

    def __init__(self, spec: EnvSpec, exploration: Exploration, **kwargs):
        super().__init__(spec, exploration, **kwargs)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)

    def make_actor(self, spec: EnvSpec, hidden: Sequence[int]) -> torch.nn.Module:
        return DeterministicActor(spec, hidden)

    def target_pairs(self):
        return [(self.actor_target, self.actor), (self.critics_target, self.critics)]

    def make_optimizers(self):
        return [
            adam(self.actor.parameters(), lr=self.actor_lr),
            adam(self.critics.parameters(), lr=self.critic_lr),
        ]

    # --- the paper's pieces; subclasses override these ------------------------------

    def target_action(self, next_observation: torch.Tensor) -> torch.Tensor:
        return self.actor_target(next_observation)

    def td_target(self, batch) -> torch.Tensor:
        """``y = r + discount * min_i Q'_i(s', mu'(s'))`` (one critic for DDPG)."""
        with torch.no_grad():
            next_action = self.target_action(batch["next_observation"])
            next_q = self.min_q(self.critics_target, batch["next_observation"], next_action)
            return batch["reward"] + batch["discount"] * next_q

    def actor_loss(self, observation: torch.Tensor) -> torch.Tensor:
        """``-Q_1(s, mu(s))``: ascend the first critic."""
        return -self.critics[0](observation, self.actor(observation)).mean()

    def should_update_actor(self) -> bool:
        return True

    # --- one update -----------------------------------------------------------------

    def update(self, sample: Sample) -> dict[str, torch.Tensor]:
        actor_optimizer, critic_optimizer = self.optimizers()
        metrics = self.update_critics(sample, critic_optimizer)
        if self.should_update_actor():
            loss_actor = self.actor_loss(sample.batch["observation"])
            self.optimize(actor_optimizer, loss_actor)
            metrics["loss_actor"] = loss_actor.detach()
        return metrics
