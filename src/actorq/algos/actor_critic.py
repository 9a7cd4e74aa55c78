"""What every actor-critic learner shares: an actor, ``num_critics`` critics with
soft-updated targets, the importance-weighted critic loss, and the ``make_actor`` /
``make_critic`` hooks.

With ``batch_critics=True``, twin (or more) default critics run as one
:class:`~actorq.algos.networks.CriticEnsemble`: one batched matmul per layer for all of them.
``critics[i]`` is still critic ``i`` as a module of its own, and iterating over ``critics``
still gives one critic at a time; a learner whose ``make_critic`` is overridden keeps a plain
``nn.ModuleList``. It is off by default: on a CPU thread the update is matmul-bound and the
batched matmul ran slower than two plain ones (docs/benchmarks.md, learner section).

DDPG (and TD3, D4PG through it) and SAC build on :class:`ActorCriticLearner`; each says what
its actor is and how its TD target is formed (:meth:`ActorCriticLearner.td_target`). A new
variant (TQC's quantile critics, REDQ's ensemble) overrides ``num_critics``,
:meth:`~ActorCriticLearner.make_critic` or :meth:`~ActorCriticLearner.td_target` in one new file.
"""

from __future__ import annotations

import copy
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from actorq.algos.base import Exploration, check_positive
from actorq.algos.off_policy import OffPolicyLearner
from actorq.envs import EnvSpec
from actorq.algos.networks import Critic, CriticEnsemble
from actorq.algos.batches import Sample


class ActorCriticLearner(OffPolicyLearner):
    """An off-policy learner with an actor and ``num_critics`` critics ``Q_i(s, a)`` with targets.

    Args:
        spec: a continuous-action environment spec.
        exploration: the actors' exploration schedule.
        actor_hidden: hidden widths of the policy MLP.
        actor_lr: Adam learning rate of the policy.
        critic_hidden: hidden widths of each critic MLP.
        critic_layer_norm: layer-normalise the critics' hidden layers.
        critic_out_dim: outputs per critic (1 for a scalar Q; atoms for a distributional one).
        critic_lr: Adam learning rate of the critics.
        batch_critics: run two or more default critics as one batched network
            (:class:`~actorq.algos.networks.CriticEnsemble`); same outputs and gradients, fewer ops,
            but slower on a CPU thread (measured), hence off by default.
        compile_losses: ``torch.compile`` the critic and actor losses (forward and backward)
            when training starts: after seconds of compiling, ~10% more updates/s for SAC on
            one CPU thread and none or fewer for TD3 (measured, docs/benchmarks.md), hence off
            by default.
        **kwargs: :class:`~actorq.algos.off_policy.OffPolicyLearner` arguments.
    """

    num_critics = 1

    def __init__(
        self,
        spec: EnvSpec,
        exploration: Exploration,
        actor_hidden: Sequence[int] = (256, 256),
        actor_lr: float = 1e-3,
        critic_hidden: Sequence[int] = (256, 256),
        critic_layer_norm: bool = False,
        critic_out_dim: int = 1,
        critic_lr: float = 1e-3,
        batch_critics: bool = False,
        compile_losses: bool = False,
        **kwargs: Any,
    ):
        super().__init__(spec, exploration, **kwargs)
        check_positive(actor_lr=actor_lr, critic_lr=critic_lr)
        self.actor = self.make_actor(spec, actor_hidden)
        critics = [self.make_critic(spec, critic_hidden, critic_layer_norm, critic_out_dim)
                   for _ in range(self.num_critics)]
        default_critics = (type(self).make_critic is ActorCriticLearner.make_critic
                           and all(type(critic) is Critic for critic in critics))
        batchable = len(critics) > 1 and default_critics
        self.critics = CriticEnsemble(critics) if batch_critics and batchable else nn.ModuleList(critics)
        self.critics_target = copy.deepcopy(self.critics).requires_grad_(False)
        self.actor_lr = actor_lr
        self.critic_lr = critic_lr
        self.compile_losses = compile_losses
        self._losses_compiled = False

    @property
    def behaviour_network(self) -> nn.Module:
        return self.actor

    def on_fit_start(self) -> None:
        super().on_fit_start()
        if self.compile_losses:
            self.compile_the_losses()

    def compile_the_losses(self) -> None:
        """Replaces :meth:`critic_loss` and :meth:`actor_loss` on this learner with their
        ``torch.compile`` d forms (compiled at their first call; idempotent)."""
        if not self._losses_compiled:
            self.critic_loss = torch.compile(self.critic_loss)
            self.actor_loss = torch.compile(self.actor_loss)
            self._losses_compiled = True

    @abstractmethod
    def make_actor(self, spec: EnvSpec, hidden: Sequence[int]) -> nn.Module:
        """The policy network (a ``trunk`` MLP and a ``head``, see
        :func:`~actorq.algos.base.check_policy_network`)."""

    def make_critic(self, spec: EnvSpec, hidden: Sequence[int], layer_norm: bool, out_dim: int) -> nn.Module:
        """One critic ``(obs, action) -> value``; override for another critic architecture."""
        return Critic(spec, hidden, layer_norm=layer_norm, out_dim=out_dim)

    @abstractmethod
    def td_target(self, batch) -> torch.Tensor:
        """The regression target of every critic for a batch of transitions (no gradient)."""

    def critic_loss(self, sample: Sample) -> tuple[torch.Tensor, torch.Tensor]:
        """Importance-weighted squared TD error summed over critics, and the first TD error."""
        batch = sample.batch
        target = self.td_target(batch)
        td_errors = self.q_values(self.critics, batch["observation"], batch["action"]) - target
        loss = (sample.weights * td_errors.pow(2)).mean(dim=-1).sum()
        return loss, td_errors[0]

    @staticmethod
    def q_values(critics: nn.Module, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``[Q_1(s, a), ..., Q_E(s, a)]`` stacked, ``[E, B]``: one call of a
        :class:`~actorq.algos.networks.CriticEnsemble`, or one per critic of any other collection."""
        if isinstance(critics, CriticEnsemble):
            return critics(observation, action)
        return torch.stack([q(observation, action) for q in critics])

    def min_q(self, critics: nn.Module, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``min_i Q_i(s, a)`` over ``critics`` (the clipped double-Q estimate)."""
        return self.q_values(critics, observation, action).min(dim=0).values

    def update_critics(self, sample: Sample, optimizer) -> dict[str, torch.Tensor]:
        """One critic step; feeds the TD errors back as priorities; returns its terms."""
        loss_value, td_error = self.critic_loss(sample)
        self.optimize(optimizer, loss_value)
        self.feed_priorities(sample, td_error)
        return {"loss_value": loss_value.detach(), "td_error": td_error.detach().abs().mean()}
