"""TD3 (Fujimoto et al. 2018): DDPG plus twin critics, target policy smoothing and
delayed policy updates. Only those three changes live here.

Example:
    >>> from actorq.envs import EnvSpec
    >>> from actorq.algos.base import Exploration
    >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> learner = TD3(spec, Exploration(0.1), policy_delay=2)
"""

from __future__ import annotations

import warnings

import torch

from actorq.algos.ddpg import DDPG

# The delayed actor skips its optimizer on some updates while every scheduler steps once per
# update (the schedule counts updates, not optimizer steps), which torch warns about.
warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before `optimizer\.step\(\)`")


class TD3(DDPG):
    """Twin delayed DDPG.

    Args:
        target_noise: std of the smoothing noise on target actions (fraction of half range).
        target_noise_clip: clip of that noise (fraction of half range).
        policy_delay: critic updates per actor (and target) update.
        *args, **kwargs: :class:`~actorq.algos.ddpg.DDPG` arguments.
    """

    num_critics = 2

    def __init__(
        self,
        *args,
        target_noise: float = 0.2,
        target_noise_clip: float = 0.5,
        policy_delay: int = 2,
        **kwargs,
    ):
        kwargs.setdefault("target_update_period", policy_delay)
        super().__init__(*args, **kwargs)
        if policy_delay < 1:
            raise ValueError(f"policy_delay must be >= 1, got {policy_delay}")
        if not (target_noise >= 0 and target_noise_clip >= 0):
            raise ValueError(f"target_noise and target_noise_clip must be >= 0, got {target_noise}, {target_noise_clip}")
        self.target_noise = target_noise
        self.target_noise_clip = target_noise_clip
        self.policy_delay = policy_delay

    def target_action(self, next_observation: torch.Tensor) -> torch.Tensor:
        """Target policy smoothing: clipped Gaussian noise on the target action."""
        action = self.actor_target(next_observation)
        half_range = self.actor.head.half_range
        noise = (torch.randn_like(action) * self.target_noise).clamp(
            -self.target_noise_clip, self.target_noise_clip
        )
        low = self.actor.head.center - half_range
        return torch.max(torch.min(action + noise * half_range, low + 2 * half_range), low)

    def should_update_actor(self) -> bool:
        # learner_steps counts finished updates; this one is number learner_steps + 1.
        return (self.learner_steps + 1) % self.policy_delay == 0
