"""D4PG: the categorical projection against the paper's formula, and the update on a fixed batch."""

import pytest
import torch

from actorq.algos.base import Exploration
from actorq.algos.d4pg import D4PG, categorical_projection
from tests.helpers import CONTINUOUS, fit_fixed_batch, random_sample


def brute_force_projection(atoms, probs, reward, discount):
    """Bellemare et al. 2017, eq. 7, one atom at a time:
    ``(Phi T Z)_i = sum_j [1 - |clip(r + d z_j) - z_i| / dz]_0^1 p_j``."""
    delta_z = float(atoms[1] - atoms[0])
    projected = torch.zeros_like(probs)
    for b in range(probs.shape[0]):
        for j in range(len(atoms)):
            shifted = float(torch.clamp(reward[b] + discount[b] * atoms[j], atoms[0], atoms[-1]))
            for i in range(len(atoms)):
                closeness = max(0.0, 1 - abs(shifted - float(atoms[i])) / delta_z)
                projected[b, i] += closeness * probs[b, j]
    return projected


def test_projection_hand_computed():
    atoms = torch.tensor([-1.0, 0.0, 1.0, 2.0])
    probs = torch.tensor([[0.5, 0.0, 0.5, 0.0],   # shift by 0.5: halves land between atoms
                          [0.0, 1.0, 0.0, 0.0],   # terminal: all mass on the reward
                          [0.25, 0.25, 0.25, 0.25]])  # reward 5: everything clips to v_max
    reward = torch.tensor([0.5, 0.7, 5.0])
    discount = torch.tensor([1.0, 0.0, 0.9])
    expected = torch.tensor([[0.25, 0.25, 0.25, 0.25],
                             [0.0, 0.3, 0.7, 0.0],
                             [0.0, 0.0, 0.0, 1.0]])
    assert torch.allclose(categorical_projection(atoms, probs, reward, discount), expected)


def test_projection_onto_exact_atoms_keeps_the_mass():
    atoms = torch.linspace(-2, 2, 5)
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.0]])
    shifted = categorical_projection(atoms, probs, torch.tensor([1.0]), torch.tensor([1.0]))
    assert torch.allclose(shifted, torch.tensor([[0.0, 0.1, 0.2, 0.3, 0.4]]))


def test_projection_matches_brute_force():
    generator = torch.Generator().manual_seed(0)
    atoms = torch.linspace(-10, 10, 11)
    probs = torch.rand(16, 11, generator=generator).softmax(-1)
    reward = torch.randn(16, generator=generator) * 6
    discount = torch.rand(16, generator=generator)
    discount[:3] = 0.0
    projected = categorical_projection(atoms, probs, reward, discount)
    assert torch.allclose(projected, brute_force_projection(atoms, probs, reward, discount), atol=1e-6)
    assert torch.allclose(projected.sum(-1), torch.ones(16))


def make_d4pg(**kwargs):
    return D4PG(CONTINUOUS, Exploration(0.3), actor_hidden=(16,), critic_hidden=(32, 32),
                critic_layer_norm=True, num_atoms=11, v_min=-10.0, v_max=10.0, **kwargs)


def test_update_returns_named_terms_lowers_the_loss_and_feeds_priorities():
    learner = make_d4pg(critic_lr=1e-3)
    losses, metrics = fit_fixed_batch(learner, CONTINUOUS)
    assert {"loss_value", "loss_actor"} <= set(metrics)
    assert losses[-1] < losses[0]
    priorities = learner.experience.replay.priorities
    assert priorities.shape == (32,) and (priorities > 0).all()


def test_target_is_the_projected_target_critic_distribution():
    learner = make_d4pg()
    batch = random_sample(CONTINUOUS).batch
    with torch.no_grad():
        next_action = learner.actor_target(batch["next_observation"])
        next_probs = learner.critics_target[0](batch["next_observation"], next_action).softmax(-1)
    expected = categorical_projection(learner.atoms, next_probs, batch["reward"], batch["discount"])
    assert torch.allclose(learner.td_target(batch), expected)


def test_actor_loss_is_minus_the_mean_of_the_value_distribution():
    learner = make_d4pg()
    observation = torch.randn(8, 3)
    with torch.no_grad():
        logits = learner.critics[0](observation, learner.actor(observation))
        expected = -(logits.softmax(-1) * torch.linspace(-10, 10, 11)).sum(-1).mean()
    assert torch.allclose(learner.actor_loss(observation), expected)


def test_importance_weights_scale_the_loss():
    learner = make_d4pg()
    sample = random_sample(CONTINUOUS)
    loss, per_sample = learner.critic_loss(sample)
    sample.weights = torch.zeros(32)
    sample.weights[0] = 32.0
    weighted, _ = learner.critic_loss(sample)
    assert torch.allclose(loss, per_sample.mean()) and torch.allclose(weighted, per_sample[0])


@pytest.mark.parametrize(("kwargs", "message"), [({"num_atoms": 1}, "num_atoms"),
                                                 ({"v_min": 5.0, "v_max": 5.0}, "v_min")])
def test_invalid_support_is_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        D4PG(CONTINUOUS, Exploration(0.3), **kwargs)
