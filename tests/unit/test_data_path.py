"""The learner's data path without a Trainer: the experience pipeline is built from what
train() hands it (the frame clock, n-step settings, planned updates), and the learner learns
from the experience it is handed."""

import dataclasses
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from actorq.actors.policy import actor_policy
from actorq.algos.base import Exploration
from actorq.algos.dqn import DQN
from actorq.algos.ppo import PPO
from actorq.experience import CALIBRATION_OBSERVATIONS, Experience, ExperienceSpec, ReplayFeed, RolloutFeed
from actorq.data.replay.factory import transition_template
from actorq.envs import make_env
from actorq.quant import QuantSpec
from actorq.data.replay import make_replay
from actorq.data.replay.prioritized import PrioritizedReplay
from tests.helpers import CONTINUOUS, DISCRETE


class NoTrainer:
    """Stands in for the Trainer an experience pipeline is attached to: a rank and nothing
    more (no ``lightning_module``)."""

    global_rank, world_size = 0, 1


class RecordingPool:
    """Stands in for the actor pool: records how it was started and what it was pushed."""

    def __init__(self, **kwargs):
        self.started = kwargs
        self.pushed_noise = []
        self.dropped_frames, self.restarts = 3, 1

    def push(self, policy):
        self.pushed_noise.append(float(policy.noise_scale))


DYNAMIC_INT8 = QuantSpec(bits=8, mode="dynamic")


def experience_of(learner: DQN | PPO, planned_updates: int = 123, env_name: str = "CartPole-v1",
                  quant: QuantSpec = DYNAMIC_INT8) -> Experience:
    policy = actor_policy(learner, quant, torch.randn(16, learner.spec.obs_dim))
    feed = (ReplayFeed(partial(make_replay, capacity=1000, prioritized=True), n_step=getattr(learner, "n_step", 1),
                       gamma=learner.gamma, planned_updates=planned_updates)
            if learner.experience_kind == "replay" else RolloutFeed())
    experience = Experience(ExperienceSpec(env_name, seed=7), make_actors=partial(RecordingPool, total_frames=1000),
                            actor_policy=policy, clock=learner.clock, feed=feed)
    experience.trainer = NoTrainer()
    return experience


def test_the_experience_starts_from_the_clock_it_was_handed_and_reads_no_learner():
    learner = DQN(DISCRETE, Exploration(1.0, 0.5, anneal_frames=1000), hidden=(8,), n_step=3, gamma=0.9)
    experience = experience_of(learner)
    experience.setup("fit")
    assert experience.writer.n_step == 3 and experience.writer.gamma == 0.9
    assert isinstance(experience.replay, PrioritizedReplay)
    assert experience.replay.priorities.beta_annealing_steps == 123
    learner.frames = 500  # a resumed run: the learner's restored frame count
    pool = experience.train_dataloader()
    assert pool.started["frames_done"] == 500 and pool.started["seed"] == 7 + 500
    assert float(experience.actor_policy.noise_scale) == learner.noise_scale == 0.75
    learner.frames = 1000  # one place sets the actors' exploration scale: every push refreshes it
    experience.calibration_and_held_out = lambda count, held_out: (torch.randn(count, 4), None)
    pushed = experience.push(learner.behaviour_network)
    assert pool.pushed_noise == [0.5] and pushed.version == experience.policy_version == 1
    assert int(experience.actor_policy.policy_version) == 1  # the version travels with the weights
    assert experience.actor_counters() == {"dropped_frames": 3, "restarts": 1}


def test_the_actors_precision_is_their_policys():
    experience = experience_of(DQN(DISCRETE, Exploration(0.1), hidden=(8,)))
    assert experience.quant is experience.actor_policy.network.quant
    assert experience.state_dict()["quant"] == dataclasses.asdict(QuantSpec(bits=8, mode="dynamic"))


def test_the_learner_learns_from_the_experience_it_is_handed():
    learner = DQN(DISCRETE, Exploration(0.1), hidden=(8,), batch_size=4, learning_starts=0)
    with pytest.raises(RuntimeError, match=r"call learner.learn_from\(experience\) before trainer.fit"):
        learner.on_fit_start()
    experience = experience_of(learner)
    learner.learn_from(experience)
    assert learner.experience is experience
    learner.on_fit_start()  # ready to fit


def test_a_restored_experience_gives_the_actors_the_whole_version_they_ran_before_the_stop():
    """A resumed run's first round must run the checkpoint's policy version (payload, learned
    log-std, observation statistics, version number), not a fresh learner's head and statistics."""
    trained = PPO(CONTINUOUS, hidden=(8,), normalize_observations=True)
    trained.policy.normalizer.update(3 * torch.randn(64, CONTINUOUS.obs_dim) + 2)
    with torch.no_grad():
        trained.policy.head.log_std.fill_(-1.5)
    stopped = experience_of(trained, env_name="Pendulum-v1")
    stopped.train_dataloader()
    stopped.calibration_and_held_out = lambda count, held_out: (torch.randn(count, CONTINUOUS.obs_dim), None)
    for _ in range(2):
        stopped.push(trained.behaviour_network)

    fresh = PPO(CONTINUOUS, hidden=(8,), normalize_observations=True)
    resumed = experience_of(fresh, env_name="Pendulum-v1")
    resumed.load_state_dict(stopped.state_dict())

    before, after = stopped.actor_policy, resumed.actor_policy
    assert int(after.policy_version) == int(before.policy_version) == resumed.policy_version == 2
    observations = 3 * torch.randn(32, CONTINUOUS.obs_dim) + 2
    torch.manual_seed(0)
    action, log_prob = before.network.sample_with_log_prob(observations)
    torch.manual_seed(0)
    restored_action, restored_log_prob = after.network.sample_with_log_prob(observations)
    torch.testing.assert_close(restored_action, action, atol=0, rtol=0)
    torch.testing.assert_close(restored_log_prob, log_prob, atol=0, rtol=0)


def test_a_run_resumed_from_an_interrupted_update_pushes_the_learners_policy_before_the_first_round():
    """A checkpoint written after a rollout's updates began and before their push (Ctrl-C, an
    error) holds a learner newer than the actors' saved version: at the same version number, a
    lock-step round would run the saved payload, not the policy the learner trains from. The
    resumed run pushes the learner's policy when training starts; resumed from a checkpoint
    written after the push, it pushes nothing."""
    from types import SimpleNamespace

    from actorq.callbacks.push import PolicyPush

    fp32 = QuantSpec(bits=32)  # the actors' copy is then the learner's policy itself
    stopped_learner = PPO(CONTINUOUS, hidden=(8,))
    stopped = experience_of(stopped_learner, env_name="Pendulum-v1", quant=fp32)
    stopped.train_dataloader()
    stopped.receive(TensorDict({"observation": torch.randn(2, 16, CONTINUOUS.obs_dim),
                                "next": {"done": torch.zeros(2, 16, 1, dtype=torch.bool)}}, batch_size=[2, 16]))
    push = PolicyPush(every_n_steps=1)
    push.push(stopped, stopped_learner)  # version 1, at learner step 0
    with torch.no_grad():  # the next rollout's updates, interrupted before their push
        stopped_learner.policy.trunk[0].weight.add_(0.5)
    stopped_learner.learner_steps = 3
    observations = torch.randn(16, CONTINUOUS.obs_dim)

    def resumed_at(last_push_step: int):
        learner = PPO(CONTINUOUS, hidden=(8,))
        learner.load_state_dict(stopped_learner.state_dict())
        learner.learner_steps = stopped_learner.learner_steps
        experience = experience_of(learner, env_name="Pendulum-v1", quant=fp32)
        experience.load_state_dict(stopped.state_dict())
        experience.train_dataloader()
        restored = PolicyPush(every_n_steps=1)
        restored.load_state_dict({**push.state_dict(), "last_step": last_push_step})
        restored.on_train_start(SimpleNamespace(sanity_checking=False, datamodule=experience), learner)
        return experience, learner

    experience, learner = resumed_at(push.last_step)
    assert experience.policy_version == 2 and experience.actors.pushed_noise  # pushed before any round
    assert torch.equal(experience.actor_policy.network(observations), learner.behaviour_network(observations))
    experience, learner = resumed_at(3)  # a checkpoint written after the step's push
    assert experience.policy_version == 1 and not experience.actors.pushed_noise
    assert not torch.equal(experience.actor_policy.network(observations), learner.behaviour_network(observations))


def stored(observations: torch.Tensor):
    """Transitions of CartPole whose observations are ``observations``."""
    transitions = transition_template(make_env("CartPole-v1")).expand(len(observations)).clone()
    transitions["observation"] = observations
    return transitions


def rand_after(draws: Callable[[], Any]) -> tuple[Any, torch.Tensor]:
    """What ``draws()`` returns, and torch's next draw after it from seed 3."""
    torch.manual_seed(3)
    result = draws()
    return result, torch.rand(3)


@pytest.mark.parametrize("drawn_before", [False, True])
def test_a_checkpoint_keeps_a_calibration_set_of_stored_observations_and_changes_no_draw(drawn_before):
    """The set comes from the replay, as a push's would; saving it leaves the next push's
    draws as they would have been (how often a run checkpoints changes nothing it does)."""
    observations = torch.arange(200 * 4, dtype=torch.float32).reshape(200, 4)
    checkpointed, twin = (experience_of(DQN(DISCRETE, Exploration(0.1), hidden=(8,))) for _ in range(2))
    for experience in (checkpointed, twin):
        experience.setup("fit")
        experience.replay.extend(stored(observations))
        if drawn_before:  # a push drew its calibration set before
            experience.calibration_observations(8)
    state, after = rand_after(checkpointed.state_dict)
    kept = state[CALIBRATION_OBSERVATIONS]
    assert QuantSpec(bits=8).calibration_samples > 200 and kept.shape == (200, 4)  # all it holds, each once
    assert torch.equal(kept[kept[:, 0].argsort()], observations)
    assert torch.equal(after, rand_after(lambda: None)[1])  # torch's draws untouched
    assert torch.equal(checkpointed.calibration_observations(8), twin.calibration_observations(8))


def test_a_rollout_checkpoint_keeps_observations_of_the_last_rollout_and_changes_no_draw():
    learner = DQN(DISCRETE, Exploration(0.1), hidden=(8,))
    experience = Experience(
        ExperienceSpec("CartPole-v1"), make_actors=partial(RecordingPool, total_frames=1000),
        actor_policy=actor_policy(learner, QuantSpec(bits=8, mode="dynamic"), torch.randn(16, 4)),
        clock=learner.clock, feed=RolloutFeed(),
    )
    assert CALIBRATION_OBSERVATIONS not in experience.state_dict()  # nothing arrived yet
    observations = torch.randn(2, 32, 4)
    experience.receive(TensorDict({"observation": observations, "next": {"done": torch.zeros(2, 32, 1, dtype=bool)}},
                                  batch_size=[2, 32]))
    state, after = rand_after(experience.state_dict)
    kept = state[CALIBRATION_OBSERVATIONS]
    assert torch.equal(after, rand_after(lambda: None)[1])  # torch's draws untouched
    assert (kept[:, None, :] == observations.reshape(-1, 4)[None]).all(-1).any(-1).all()


def test_a_resumed_run_keeps_the_saved_set_until_experience_arrives():
    saved = torch.randn(512, 4)
    experience = experience_of(DQN(DISCRETE, Exploration(0.1), hidden=(8,)))
    experience.setup("fit")
    experience.load_state_dict({"replay": {}, CALIBRATION_OBSERVATIONS: saved})
    assert experience.state_dict()[CALIBRATION_OBSERVATIONS] is saved  # an empty replay: the resumed set
    experience.replay.extend(stored(torch.full((10, 4), 7.0)))
    assert (experience.state_dict()[CALIBRATION_OBSERVATIONS] == 7.0).all()
