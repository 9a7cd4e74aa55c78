"""SAC (Haarnoja et al. 2018): maximum-entropy actor-critic with a learned temperature.

The policy ``pi_phi`` is a tanh-squashed Gaussian; twin soft Q-functions ``Q_theta1``,
``Q_theta2`` with soft-updated targets; the temperature ``alpha`` is tuned so the policy's
entropy tracks ``target_entropy`` (the "automating entropy adjustment" of the second paper,
"Soft Actor-Critic Algorithms and Applications").

SAC shares DDPG's critics (their construction, targets and loss) but neither its
deterministic actor nor its target policy, so both build on
:class:`~actorq.algos.actor_critic.ActorCriticLearner`. The actors sample from the
policy itself (``stochastic``: the actors' policy calls the network's ``sample``);
evaluation uses the deterministic action ``tanh(mean)``.

Example:
    >>> from actorq.envs import EnvSpec
    >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> learner = SAC(spec, actor_hidden=(64, 64), critic_hidden=(64, 64))
    >>> learner.target_entropy, float(learner.alpha)
    (-1.0, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from actorq.algos.actor_critic import ActorCriticLearner
from actorq.algos.base import Exploration, adam, check_positive
from actorq.envs import EnvSpec
from actorq.algos.networks import GaussianActor
from actorq.algos.batches import Sample


class SAC(ActorCriticLearner):
    """Soft actor-critic with twin critics and automatic temperature tuning.

    Args:
        spec: a continuous-action environment spec.
        exploration: unused by the actors (they sample from the policy); accepted so every
            learner is built the same way. Defaults to a zero scale.
        alpha_lr: Adam learning rate of ``log(alpha)``.
        init_alpha: the temperature at the start.
        target_entropy: the entropy ``alpha`` steers towards; ``None`` gives ``-action_dim``.
        actor_lr, critic_lr: Adam learning rates (SAC's paper uses 3e-4 for both).
        **kwargs: :class:`~actorq.algos.actor_critic.ActorCriticLearner` arguments
            (``actor_hidden``, ``critic_hidden``, ``critic_layer_norm``, ...).
    """

    num_critics = 2
    stochastic = True
    records = ()  # its head has no log_prob of a squashed action to check a recorded one against

    def __init__(
        self,
        spec: EnvSpec,
        exploration: Exploration | None = None,
        alpha_lr: float = 3e-4,
        init_alpha: float = 1.0,
        target_entropy: float | None = None,
        actor_lr: float = 3e-4,
        critic_lr: float = 3e-4,
        **kwargs,
    ):
        check_positive(init_alpha=init_alpha, alpha_lr=alpha_lr)
        super().__init__(spec, exploration or Exploration(0.0), actor_lr=actor_lr, critic_lr=critic_lr, **kwargs)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_alpha)))
        self.target_entropy = float(-spec.action_dim if target_entropy is None else target_entropy)
        self.alpha_lr = alpha_lr

    def make_actor(self, spec: EnvSpec, hidden: Sequence[int]) -> nn.Module:
        return GaussianActor(spec, hidden)

    @property
    def alpha(self) -> torch.Tensor:
        """The temperature ``alpha = exp(log_alpha)`` (detached)."""
        return self.log_alpha.detach().exp()

    def target_pairs(self):
        return [(self.critics_target, self.critics)]

    def make_optimizers(self):
        return [
            adam(self.critics.parameters(), lr=self.critic_lr),
            adam(self.actor.parameters(), lr=self.actor_lr),
            adam([self.log_alpha], lr=self.alpha_lr),
        ]

    # --- the paper's three objectives -----------------------------------------------

    def td_target(self, batch) -> torch.Tensor:
        """``y = r + discount * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))``, ``a' ~ pi(s')``."""
        with torch.no_grad():
            next_action, next_log_prob = self.actor.rsample_with_log_prob(batch["next_observation"])
            next_q = self.min_q(self.critics_target, batch["next_observation"], next_action)
            soft_value = next_q - self.alpha * next_log_prob
            return batch["reward"] + batch["discount"] * soft_value

    def actor_loss(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``J_pi = E[alpha * log pi(a|s) - min_i Q_i(s, a)]``, ``a ~ pi(s)`` reparameterised;
        also returns ``log pi(a|s)`` for the temperature update."""
        action, log_prob = self.actor.rsample_with_log_prob(observation)
        q = self.min_q(self.critics, observation, action)
        return (self.alpha * log_prob - q).mean(), log_prob.detach()

    def alpha_loss(self, log_prob: torch.Tensor) -> torch.Tensor:
        """``J(alpha) = E[-alpha * (log pi(a|s) + target_entropy)]``, written in ``log alpha``."""
        return -(self.log_alpha * (log_prob + self.target_entropy)).mean()

    # --- one update -----------------------------------------------------------------

    def update(self, sample: Sample) -> dict[str, torch.Tensor]:
        critic_optimizer, actor_optimizer, alpha_optimizer = self.optimizers()
        metrics = self.update_critics(sample, critic_optimizer)

        loss_actor, log_prob = self.actor_loss(sample.batch["observation"])
        self.optimize(actor_optimizer, loss_actor)

        loss_alpha = self.alpha_loss(log_prob)
        self.optimize(alpha_optimizer, loss_alpha)
        return {
            **metrics,
            "loss_actor": loss_actor.detach(),
            "loss_alpha": loss_alpha.detach(),
            "alpha": self.alpha,
            "entropy": -log_prob.mean(),
        }
