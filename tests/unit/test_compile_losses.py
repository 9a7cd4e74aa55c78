"""``compile_losses``: the actor-critic learners' losses under ``torch.compile`` give the eager
update, and a run's learner compiles them when training starts."""

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config

from actorq.algos.base import Exploration
from actorq.algos.d4pg import D4PG
from actorq.algos.sac import SAC
from actorq.algos.td3 import TD3
from tests.helpers import CONTINUOUS, attach_trainer, random_sample


def compiled_graphs() -> int:
    return counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("algo", [TD3, SAC, D4PG])
def test_compiled_losses_give_the_eager_update(algo):
    def build(compile_losses):
        torch.manual_seed(0)
        learner = algo(CONTINUOUS, Exploration(0.1), actor_hidden=(16,), critic_hidden=(16, 16),
                       compile_losses=compile_losses, policy_delay=1) if algo is TD3 else \
            algo(CONTINUOUS, Exploration(0.1), actor_hidden=(16,), critic_hidden=(16, 16),
                 compile_losses=compile_losses)
        attach_trainer(learner)
        return learner

    compiled, eager = build(True), build(False)
    compiled.compile_the_losses()
    graphs = compiled_graphs()
    sample = random_sample(CONTINUOUS)
    # Compiled code draws its own random numbers unless told to take eager's (TD3's target
    # noise, SAC's sampled actions): with eager's, the two updates must agree.
    with inductor_config.patch(fallback_random=True):
        for _ in range(2):
            torch.manual_seed(1)
            compiled_terms = compiled.update(sample)
            torch.manual_seed(1)
            eager_terms = eager.update(sample)
            for name in eager_terms:
                torch.testing.assert_close(compiled_terms[name], eager_terms[name], rtol=1e-4, atol=1e-5, msg=name)
    assert compiled_graphs() > graphs  # the update ran through compiled graphs, not the eager losses
    observation = sample.batch["observation"]
    torch.testing.assert_close(compiled.actor(observation), eager.actor(observation), rtol=1e-4, atol=1e-5)


def test_training_start_compiles_the_losses_only_when_asked():
    for flag in (False, True):
        learner = TD3(CONTINUOUS, Exploration(0.1), actor_hidden=(8,), critic_hidden=(8,), compile_losses=flag)
        attach_trainer(learner)
        learner.on_fit_start()
        assert ("critic_loss" in vars(learner) and "actor_loss" in vars(learner)) == flag  # shadows the methods
