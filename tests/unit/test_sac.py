"""SAC: the squashed Gaussian policy, the temperature update, and the update on a fixed batch."""

import math
import pickle

import pytest
import torch
from torch.distributions import AffineTransform, TanhTransform, TransformedDistribution

from actorq.actors.policy import ExplorationPolicy, learner_policy
from actorq.algos.sac import SAC
from actorq.algos.networks import DeterministicActor, GaussianActor
from tests.helpers import CONTINUOUS, attach_trainer, fit_fixed_batch, random_sample


def make_sac(**kwargs):
    learner = SAC(CONTINUOUS, actor_hidden=(16,), critic_hidden=(32, 32), **kwargs)
    attach_trainer(learner)
    return learner


def test_update_returns_named_terms_and_feeds_priorities():
    learner = SAC(CONTINUOUS, actor_hidden=(16,), critic_hidden=(32, 32), critic_lr=1e-3)
    losses, metrics = fit_fixed_batch(learner, CONTINUOUS)
    assert {"loss_value", "loss_actor", "loss_alpha", "alpha"} <= set(metrics)
    assert losses[-1] < losses[0]
    assert learner.experience.replay.priorities.shape == (32,)


@pytest.mark.parametrize(("target_entropy", "direction"), [(-20.0, -1), (20.0, 1)])
def test_temperature_moves_toward_the_target_entropy(target_entropy, direction):
    # Entropy above the target lowers alpha (less entropy bonus); below it raises alpha.
    learner = make_sac(target_entropy=target_entropy, alpha_lr=1e-2)
    for _ in range(20):
        metrics = learner.update(random_sample(CONTINUOUS))
    assert direction * (float(metrics["alpha"]) - 1.0) > 0.1


def test_alpha_gradient_has_the_sign_of_the_entropy_gap():
    learner = SAC(CONTINUOUS, target_entropy=-1.0)
    log_prob = torch.full((8,), 0.5)  # entropy estimate -0.5 > target -1.0
    learner.alpha_loss(log_prob).backward()
    assert learner.log_alpha.grad > 0  # a gradient step lowers alpha


def test_log_prob_matches_the_change_of_variables():
    actor = GaussianActor(CONTINUOUS, (16,))
    observation = torch.randn(64, 3)
    action, log_prob = actor.rsample_with_log_prob(observation)
    gaussian = actor.head.distribution(actor.trunk(observation))
    squashed = TransformedDistribution(gaussian, [TanhTransform(), AffineTransform(0.0, 2.0)])
    inside = action.abs() < 1.99  # atanh is ill-conditioned at the bounds
    expected = squashed.log_prob(action).sum(-1)
    assert torch.allclose(log_prob[inside.squeeze(-1)], expected[inside.squeeze(-1)], atol=1e-3)


def test_actors_sample_within_bounds_and_at_random():
    learner = SAC(CONTINUOUS, actor_hidden=(16,))
    policy = learner_policy(learner)
    assert policy.stochastic
    observation = torch.zeros(2000, 3)
    actions = policy(observation)
    assert actions.shape == (2000, 1)
    assert actions.abs().max() <= 2.0 and actions.std() > 0.3
    assert policy(torch.zeros(3)).shape == (1,)  # unbatched, as collectors probe it
    pickle.loads(pickle.dumps(policy))  # workers receive it pickled


def test_deterministic_act_is_the_squashed_mean_within_bounds():
    learner = SAC(CONTINUOUS, actor_hidden=(16,))
    with torch.no_grad():
        learner.actor.trunk[-1].bias.copy_(torch.tensor([100.0, 0.0]))  # mean far beyond the bound
    observation = torch.randn(50, 3)
    first, second = learner.act(observation), learner.act(observation)
    assert torch.equal(first, second)
    assert first.abs().max() <= 2.0 and torch.allclose(first, torch.full((50, 1), 2.0))


def test_log_std_is_clamped():
    actor = GaussianActor(CONTINUOUS, (16,))
    with torch.no_grad():
        actor.trunk[-1].bias.copy_(torch.tensor([0.0, -100.0]))
        actor.trunk[-1].weight.zero_()
    std = actor.head.distribution(actor.trunk(torch.zeros(1, 3))).stddev
    assert std.item() == pytest.approx(math.exp(-5.0))


def test_stochastic_policy_needs_a_sampling_network():
    with pytest.raises(ValueError, match="sample.*DeterministicActor"):
        ExplorationPolicy(DeterministicActor(CONTINUOUS, (8,)), CONTINUOUS, 0.1, stochastic=True)


def test_targets_cover_the_critics_only():
    learner = SAC(CONTINUOUS, actor_hidden=(16,), critic_hidden=(16,))
    assert [online for _, online in learner.target_pairs()] == [learner.critics]
    with pytest.raises(ValueError, match="init_alpha"):
        SAC(CONTINUOUS, init_alpha=0.0)
