"""D4PG (Barth-Maron et al. 2018): DDPG with a distributional critic and n-step returns.

What changes from :class:`~actorq.algos.ddpg.DDPG` lives here, nothing else:

* the critic ``Z_w(s, a)`` outputs logits over ``num_atoms`` fixed atoms ``z_i`` in
  ``[v_min, v_max]``, and ``Q_w(s, a) = sum_i p_i(s, a) * z_i``;
* the target distribution ``Y = r + discount * Z_w'(s', pi_theta'(s'))`` is projected back onto
  the atoms (:func:`categorical_projection`), and the critic minimises the cross-entropy to it;
* the actor ascends ``Q_w(s, pi_theta(s))``.

N-step returns come from the base learner (``n_step``): every transition already holds the
summed reward and ``discount = gamma**k * (1 - terminated)``. Prioritized replay gets the
per-sample cross-entropy as priority.

Example:
    >>> from actorq.envs import EnvSpec
    >>> from actorq.algos.base import Exploration
    >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> learner = D4PG(spec, Exploration(0.3), num_atoms=51, v_min=-150.0, v_max=150.0, n_step=5)
    >>> learner.atoms.shape
    torch.Size([51])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from actorq.algos.ddpg import DDPG
from actorq.algos.batches import Sample


def categorical_projection(
    atoms: torch.Tensor, probs: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor
) -> torch.Tensor:
    """Projects the distribution of ``reward + discount * Z`` onto the support ``atoms``.

    Each shifted atom ``r + discount * z_j`` is clipped to ``[v_min, v_max]`` and its
    probability split between the two nearest atoms, in proportion to closeness (Bellemare et
    al. 2017, eq. 7).

    Args:
        atoms: the support ``z``, ``[num_atoms]``, evenly spaced and increasing.
        probs: probabilities of ``Z`` on ``atoms``, ``[B, num_atoms]``.
        reward: ``[B]`` (n-step) rewards.
        discount: ``[B]`` bootstrap discounts (0 at terminal transitions).

    Returns:
        ``[B, num_atoms]`` probabilities on ``atoms``.

    Example:
        >>> atoms = torch.tensor([0.0, 1.0, 2.0])
        >>> categorical_projection(atoms, torch.tensor([[1.0, 0.0, 0.0]]), torch.tensor([0.5]), torch.tensor([1.0]))
        tensor([[0.5000, 0.5000, 0.0000]])
    """
    v_min, v_max = atoms[0], atoms[-1]
    delta_z = (v_max - v_min) / (len(atoms) - 1)
    shifted = (reward.unsqueeze(-1) + discount.unsqueeze(-1) * atoms).clamp(v_min, v_max)
    position = ((shifted - v_min) / delta_z).clamp(0, len(atoms) - 1)  # fractional atom index
    lower = position.floor().long()
    upper = position.ceil().long()
    upper_share = position - lower  # 0 when shifted lands on an atom: all mass goes to lower
    projected = torch.zeros_like(probs)
    projected.scatter_add_(-1, lower, probs * (1 - upper_share))
    projected.scatter_add_(-1, upper, probs * upper_share)
    return projected


class D4PG(DDPG):
    """Distributed distributional deterministic policy gradients.

    Args:
        num_atoms: number of atoms of the categorical value distribution.
        v_min: smallest atom (the lowest return the critic can represent).
        v_max: largest atom.
        *args, **kwargs: :class:`~actorq.algos.ddpg.DDPG` arguments (``n_step`` for n-step
            returns, ``critic_layer_norm``, ``target_tau`` and ``target_update_period``, ...).
    """

    def __init__(self, *args, num_atoms: int = 51, v_min: float = -150.0, v_max: float = 150.0, **kwargs):
        if num_atoms < 2:
            raise ValueError(f"num_atoms must be >= 2, got {num_atoms}")
        if not v_min < v_max:
            raise ValueError(f"v_min must be below v_max, got v_min={v_min}, v_max={v_max}")
        super().__init__(*args, critic_out_dim=num_atoms, **kwargs)
        self.num_atoms = num_atoms
        self.register_buffer("atoms", torch.linspace(v_min, v_max, num_atoms))

    def q_value(self, logits: torch.Tensor) -> torch.Tensor:
        """``Q = sum_i softmax(logits)_i * z_i``: the mean of the value distribution."""
        return (logits.softmax(-1) * self.atoms).sum(-1)

    def td_target(self, batch) -> torch.Tensor:
        """The projected target distribution ``Phi(r + discount * Z_w'(s', pi_theta'(s')))``."""
        with torch.no_grad():
            next_action = self.target_action(batch["next_observation"])
            # float32 probabilities whatever the autocast precision (bf16-mixed learners)
            next_probs = self.critics_target[0](batch["next_observation"], next_action).softmax(-1, dtype=torch.float32)
            return categorical_projection(self.atoms, next_probs, batch["reward"], batch["discount"])

    def critic_loss(self, sample: Sample) -> tuple[torch.Tensor, torch.Tensor]:
        """Importance-weighted cross-entropy to the target, and the per-sample cross-entropy."""
        batch = sample.batch
        target = self.td_target(batch)
        log_probs = F.log_softmax(self.critics[0](batch["observation"], batch["action"]), dim=-1, dtype=torch.float32)
        cross_entropy = -(target * log_probs).sum(-1)
        return (sample.weights * cross_entropy).mean(), cross_entropy.detach()

    def actor_loss(self, observation: torch.Tensor) -> torch.Tensor:
        """``-Q_w(s, pi_theta(s))``, with ``Q`` the mean of the critic's distribution."""
        return -self.q_value(self.critics[0](observation, self.actor(observation))).mean()
