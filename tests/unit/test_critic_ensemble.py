"""Twin critics as one batched network (CriticEnsemble): the same outputs and gradients as
the separate critics, per-critic modules that still work, and old checkpoints that load."""

import copy

import pytest
import torch
from torch import nn

from actorq.algos.base import Exploration
from actorq.algos.sac import SAC
from actorq.algos.td3 import TD3
from actorq.algos.networks import Critic, CriticEnsemble
from tests.helpers import CONTINUOUS, attach_trainer, random_sample


@pytest.mark.parametrize("layer_norm, out_dim", [(False, 1), (True, 5)])
def test_the_ensemble_gives_the_separate_critics_outputs_and_gradients(layer_norm, out_dim):
    torch.manual_seed(0)
    separate = nn.ModuleList(Critic(CONTINUOUS, (16, 8), layer_norm=layer_norm, out_dim=out_dim) for _ in range(3))
    with torch.no_grad():  # every parameter distinct, layer norms' affine parts included
        for parameter in separate.parameters():
            parameter.add_(torch.randn_like(parameter))
    ensemble = CriticEnsemble(copy.deepcopy(list(separate)))
    observation, action = torch.randn(6, 3), torch.randn(6, 1)
    expected = torch.stack([critic(observation, action) for critic in separate])
    together = ensemble(observation, action)
    one_at_a_time = torch.stack([critic(observation, action) for critic in ensemble])
    torch.testing.assert_close(together, expected)
    torch.testing.assert_close(one_at_a_time, expected)

    weights = torch.randn_like(expected)
    (weights * expected).sum().backward()
    (weights * together).sum().backward()
    for position, layer in enumerate(ensemble.net):
        for name, stacked in layer.named_parameters():
            grads = [getattr(critic.net[position], name).grad for critic in separate]
            if name == "weight" and isinstance(separate[0].net[position], nn.Linear):
                grads = [grad.t() for grad in grads]  # stacked linear weights are [E, in, out]
            torch.testing.assert_close(stacked.grad, torch.stack(grads), msg=f"net.{position}.{name}")


@pytest.mark.parametrize("algo", [TD3, SAC])
def test_twin_critic_learners_batch_their_critics_and_update_as_the_separate_ones(algo):
    def build(batch_critics):
        torch.manual_seed(0)
        learner = algo(CONTINUOUS, Exploration(0.1), actor_hidden=(16,), critic_hidden=(16, 16),
                       batch_critics=batch_critics)
        attach_trainer(learner)
        return learner

    batched, separate = build(True), build(False)
    assert isinstance(batched.critics, CriticEnsemble) and isinstance(batched.critics_target, CriticEnsemble)
    assert type(separate.critics) is nn.ModuleList
    sample = random_sample(CONTINUOUS)
    torch.manual_seed(1)
    batched_terms = batched.update(sample)
    torch.manual_seed(1)
    separate_terms = separate.update(sample)
    for name in separate_terms:
        torch.testing.assert_close(batched_terms[name], separate_terms[name], msg=name)
    observation, action = sample.batch["observation"], sample.batch["action"]
    for mine, theirs in zip(batched.critics, separate.critics, strict=True):
        torch.testing.assert_close(mine(observation, action), theirs(observation, action))
    torch.testing.assert_close(batched.actor(observation), separate.actor(observation))


def test_a_learner_that_overrides_make_critic_keeps_a_module_list():
    class OwnCritics(TD3):
        def make_critic(self, spec, hidden, layer_norm, out_dim):
            return Critic(spec, hidden, layer_norm, out_dim)

    learner = OwnCritics(CONTINUOUS, Exploration(0.1), critic_hidden=(8,), batch_critics=True)
    assert type(learner.critics) is nn.ModuleList


def test_a_checkpoint_of_separate_critics_loads_into_the_ensemble():
    torch.manual_seed(0)
    old = TD3(CONTINUOUS, Exploration(0.1), actor_hidden=(8,), critic_hidden=(8, 8), batch_critics=False)
    state = old.state_dict()
    assert "critics.1.net.2.weight" in state  # the layout checkpoints had before batched critics
    torch.manual_seed(1)
    new = TD3(CONTINUOUS, Exploration(0.1), actor_hidden=(8,), critic_hidden=(8, 8), batch_critics=True)
    new.load_state_dict(state)
    observation, action = torch.randn(4, 3), torch.randn(4, 1)
    for critics, old_critics in ((new.critics, old.critics), (new.critics_target, old.critics_target)):
        torch.testing.assert_close(critics(observation, action),
                                   torch.stack([critic(observation, action) for critic in old_critics]))
