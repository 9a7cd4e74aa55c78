"""Each learner's update on random data: named loss terms, targets by the paper's formula."""

import pytest
import torch

from actorq.algos.base import Exploration
from actorq.algos.off_policy import soft_update
from actorq.algos.ddpg import DDPG
from actorq.algos.dqn import DQN
from actorq.algos.td3 import TD3
from actorq.callbacks.push import PolicyPush
from actorq.util.errors import NonFiniteError
from actorq.data.replay.uniform import UniformReplay
from tests.helpers import CONTINUOUS, DISCRETE, attach_trainer, fit_fixed_batch, random_sample


@pytest.mark.parametrize(
    ("make", "spec", "terms"),
    [
        (lambda: DQN(DISCRETE, Exploration(0.1), hidden=(16,)), DISCRETE, {"loss_value"}),
        (lambda: DDPG(CONTINUOUS, Exploration(0.1), actor_hidden=(16,), critic_hidden=(16,)), CONTINUOUS,
         {"loss_value", "loss_actor"}),
        (lambda: TD3(CONTINUOUS, Exploration(0.1), actor_hidden=(16,), critic_hidden=(16,), policy_delay=1),
         CONTINUOUS, {"loss_value", "loss_actor"}),
    ],
)
def test_update_returns_named_terms_and_feeds_priorities(make, spec, terms):
    learner = make()
    losses, metrics = fit_fixed_batch(learner, spec)
    assert terms <= set(metrics)
    assert losses[-1] < losses[0]  # fitting a fixed batch lowers the TD loss
    priorities = learner.experience.replay.priorities
    assert priorities.shape == (32,) and (priorities >= 0).all()


def test_dqn_double_target():
    learner = DQN(DISCRETE, Exploration(0.1), hidden=(16,), double=True)
    batch = random_sample(DISCRETE).batch
    with torch.no_grad():
        online_best = learner.q_network(batch["next_observation"]).argmax(-1, keepdim=True)
        expected = batch["reward"] + 0.99 * learner.q_target(batch["next_observation"]).gather(-1, online_best).squeeze(-1)
    assert torch.allclose(learner.td_target(batch), expected)


def test_td3_uses_the_smaller_twin_and_delays_the_actor():
    learner = TD3(CONTINUOUS, Exploration(0.1), actor_hidden=(16,), critic_hidden=(16,), target_noise=0.0)
    batch = random_sample(CONTINUOUS).batch
    with torch.no_grad():
        next_action = learner.actor_target(batch["next_observation"])
        q1, q2 = (q(batch["next_observation"], next_action) for q in learner.critics_target)
        expected = batch["reward"] + 0.99 * torch.min(q1, q2)
    assert torch.allclose(learner.td_target(batch), expected)
    attach_trainer(learner)
    updates = []
    for step in range(4):
        updates.append("loss_actor" in learner.update(random_sample(CONTINUOUS)))
        learner.learner_steps += 1
    assert updates == [False, True, False, True]


def test_td3_target_smoothing_stays_in_bounds():
    learner = TD3(CONTINUOUS, Exploration(0.1), actor_hidden=(16,), critic_hidden=(16,), target_noise=10.0)
    actions = learner.target_action(torch.randn(500, 3))
    assert actions.min() >= -2 and actions.max() <= 2


def test_soft_update():
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    expected = 0.9 * a.weight.detach() + 0.1 * b.weight.detach()
    soft_update(a, b, 0.1)
    assert torch.allclose(a.weight, expected)


def test_exploration_schedule():
    schedule = Exploration(1.0, 0.1, anneal_frames=100)
    assert schedule(0) == 1.0 and schedule(50) == pytest.approx(0.55) and schedule(1000) == pytest.approx(0.1)
    assert Exploration(0.2)(10**6) == 0.2


def test_invalid_sizes_are_rejected():
    # batch_size, n_step and learning_starts are checked once, in actorq.run.checks
    with pytest.raises(ValueError, match="update_to_data"):
        DDPG(CONTINUOUS, Exploration(0.1), update_to_data=0)


@pytest.mark.parametrize("final_lr_fraction", [1.0, 0.25, 0.0])
def test_learning_rates_fall_linearly_to_their_final_fraction(final_lr_fraction):
    learner = DDPG(CONTINUOUS, Exploration(0.1), actor_hidden=(16,), critic_hidden=(16,),
                   actor_lr=1e-3, critic_lr=2e-3, learning_starts=0, update_to_data=1.0,
                   final_lr_fraction=final_lr_fraction)
    attach_trainer(learner, total_frames=1000)  # 1000 planned updates
    done = 0

    def rates_at(learner_steps: int) -> list[float]:
        nonlocal done
        for _ in range(learner_steps - done):  # the learner steps them once per update
            learner.step_schedulers()
        done = learner_steps
        return [group["lr"] for optimizer in learner.optimizers() for group in optimizer.optimizer.param_groups]

    assert rates_at(0) == pytest.approx([1e-3, 2e-3])
    middle = 1 - 0.5 * (1 - final_lr_fraction)
    assert rates_at(500) == pytest.approx([1e-3 * middle, 2e-3 * middle])
    assert rates_at(1000) == pytest.approx([1e-3 * final_lr_fraction, 2e-3 * final_lr_fraction])
    assert rates_at(5000) == pytest.approx([1e-3 * final_lr_fraction, 2e-3 * final_lr_fraction])


def test_final_lr_fraction_outside_zero_one_is_refused():
    with pytest.raises(ValueError, match="final_lr_fraction"):
        DQN(DISCRETE, Exploration(0.1), final_lr_fraction=1.5)


def test_logged_terms_are_means_over_the_updates_of_a_batch():
    learner = DQN(DISCRETE, Exploration(0.1), hidden=(8,), learning_starts=0, batch_size=4, update_to_data=1.0)
    attach_trainer(learner)
    replay = UniformReplay(100)
    replay.extend(random_sample(DISCRETE, size=16).batch)
    learner.experience.sampling = replay
    terms = iter(range(1, 100))
    learner.update = lambda sample: {"loss_value": torch.tensor(float(next(terms)))}
    learner.frames = 4
    metrics = learner.learn(None, new_frames=4)  # four updates: terms 1, 2, 3, 4
    assert learner.learner_steps == 4
    assert float(metrics["loss_value"]) == 2.5


def test_a_non_finite_loss_stops_training_naming_the_step_and_the_tensor():
    learner = TD3(CONTINUOUS, Exploration(0.1), actor_hidden=(16,), critic_hidden=(16,), policy_delay=1)
    attach_trainer(learner)
    learner.learner_steps = 41
    learner.update(random_sample(CONTINUOUS))  # finite: no error
    with torch.no_grad():
        learner.critics[1].net[0].weight[0, 0] = float("inf")
    with pytest.raises(NonFiniteError) as raised:
        learner.update(random_sample(CONTINUOUS))
    message = str(raised.value)
    assert "of critics at learner step 41" in message
    assert "first non-finite tensor: weight critics.1.net.0.weight" in message


def test_non_finite_weights_are_never_broadcast():
    learner = DQN(DISCRETE, Exploration(0.1), hidden=(16,))
    with torch.no_grad():
        learner.q_network.trunk[0].bias[3] = float("nan")
    with pytest.raises(NonFiniteError, match=r"non-finite weight trunk.0.bias of the policy at learner step 0"):
        PolicyPush(every_n_steps=1).push(experience=None, learner=learner)


def test_every_learner_steps_with_fused_adam():
    """The fused kernel is the same Adam in one pass over the parameters; a learner that builds
    torch's default one is up to 1.5x slower on a wide actor (``bench learner``)."""
    from actorq.algos.d4pg import D4PG
    from actorq.algos.sac import SAC

    learners = [DQN(DISCRETE, Exploration(0.1), hidden=(16,)),
                DDPG(CONTINUOUS, Exploration(0.1), actor_hidden=(16,), critic_hidden=(16,)),
                TD3(CONTINUOUS, Exploration(0.1), actor_hidden=(16,), critic_hidden=(16,)),
                D4PG(CONTINUOUS, Exploration(0.1), actor_hidden=(16,), critic_hidden=(16,)),
                SAC(CONTINUOUS, actor_hidden=(16,), critic_hidden=(16,))]
    for learner in learners:
        optimizers = learner.make_optimizers()
        assert optimizers and all(isinstance(optimizer, torch.optim.Adam) and group["fused"]
                                  for optimizer in optimizers for group in optimizer.param_groups), learner
