"""Learner details that mutation testing (``make mutants``, docs/mutation.md) found unguarded:
the papers' default hyperparameters, argument checks, gradient clipping, the update schedule
and the greedy action."""

from __future__ import annotations

import pytest
import torch

from actorq.algos.base import Exploration, LinearDecay
from actorq.algos.d4pg import D4PG
from actorq.algos.ddpg import DDPG
from actorq.algos.dqn import DQN
from actorq.algos.td3 import TD3
from actorq.data.replay.uniform import UniformReplay
from tests.helpers import CONTINUOUS, DISCRETE, attach_trainer, random_sample


def test_defaults_are_the_papers():
    dqn = DQN(DISCRETE, Exploration(0.1), hidden=(8,))
    assert (dqn.lr, dqn.max_grad_norm, dqn.double) == (1e-3, 10.0, True)
    td3 = TD3(CONTINUOUS, Exploration(0.1), actor_hidden=(8,), critic_hidden=(8,))
    assert (td3.target_noise, td3.target_noise_clip, td3.policy_delay) == (0.2, 0.5, 2)  # Fujimoto et al.
    d4pg = D4PG(CONTINUOUS, Exploration(0.3), actor_hidden=(8,), critic_hidden=(8,))
    assert d4pg.num_atoms == 51 and torch.equal(d4pg.atoms, torch.linspace(-150.0, 150.0, 51))


def test_learners_keep_what_they_are_given():
    schedule = Exploration(0.5, 0.05, 100)
    dqn = DQN(DISCRETE, schedule, hidden=(8,))
    assert dqn.spec is DISCRETE and dqn.exploration is schedule
    d4pg = D4PG(CONTINUOUS, Exploration(0.3), actor_hidden=(8,), critic_hidden=(8,), num_atoms=11, n_step=5,
                gamma=0.95)
    assert (d4pg.num_atoms, d4pg.n_step, d4pg.gamma) == (11, 5, 0.95)
    assert d4pg.critics[0](torch.zeros(2, 3), torch.zeros(2, 1)).shape == (2, 11)


def test_target_networks_take_no_gradient():
    dqn = DQN(DISCRETE, Exploration(0.1), hidden=(8,))
    ddpg = DDPG(CONTINUOUS, Exploration(0.1), actor_hidden=(8,), critic_hidden=(8,))
    for target in (dqn.q_target, ddpg.actor_target, ddpg.critics_target):
        assert not any(p.requires_grad for p in target.parameters())


def test_argument_checks_at_their_bounds():
    DQN(DISCRETE, Exploration(1.0, 1.0), max_grad_norm=0.0)  # epsilon 1 and no clipping are fine
    with pytest.raises(ValueError, match=r"epsilon \(exploration.start/end\) must be in \[0, 1\], got 1.5/0.1"):
        DQN(DISCRETE, Exploration(1.5, 0.1))
    with pytest.raises(ValueError, match="max_grad_norm must be >= 0"):
        DQN(DISCRETE, Exploration(0.1), max_grad_norm=-0.5)
    TD3(CONTINUOUS, Exploration(0.1), policy_delay=1, target_noise=0.0, target_noise_clip=0.0)
    with pytest.raises(ValueError, match="policy_delay must be >= 1"):
        TD3(CONTINUOUS, Exploration(0.1), policy_delay=0, target_update_period=1)
    for noise, clip in ((-0.1, 0.5), (0.2, -0.1)):
        with pytest.raises(ValueError, match="target_noise and target_noise_clip must be >= 0"):
            TD3(CONTINUOUS, Exploration(0.1), target_noise=noise, target_noise_clip=clip)
    D4PG(CONTINUOUS, Exploration(0.3), num_atoms=2, v_min=-1.0, v_max=1.0)  # two atoms suffice


def test_dqn_clips_the_gradient_norm():
    learner = DQN(DISCRETE, Exploration(0.1), hidden=(16,), max_grad_norm=1e-3)
    attach_trainer(learner)
    learner.update(random_sample(DISCRETE))
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in learner.q_network.parameters()]))
    assert float(norm) == pytest.approx(1e-3, rel=1e-3)


def test_ddpg_updates_its_actor_every_update():
    learner = DDPG(CONTINUOUS, Exploration(0.1), actor_hidden=(16,), critic_hidden=(16,))
    attach_trainer(learner)
    before = learner.actor.trunk[0].weight.detach().clone()
    metrics = learner.update(random_sample(CONTINUOUS))
    assert "loss_actor" in metrics and not torch.equal(before, learner.actor.trunk[0].weight)


def test_td3_actor_updates_every_policy_delay_updates():
    learner = TD3(CONTINUOUS, Exploration(0.1), actor_hidden=(16,), critic_hidden=(16,), policy_delay=3)
    pattern = []
    for steps in range(6):
        learner.learner_steps = steps
        pattern.append(learner.should_update_actor())
    assert pattern == [False, False, True, False, False, True]


def test_greedy_action_is_the_argmax_over_actions():
    learner = DQN(DISCRETE, Exploration(0.1), hidden=(16,))
    observation = torch.randn(8, 4)
    with torch.no_grad():
        expected = learner.q_network(observation).argmax(-1)
    assert torch.equal(learner.act(observation), expected)
    assert learner.act(observation[0]).shape == () and learner.act(observation[0]) == expected[0]


def test_schedules_at_their_edges():
    assert Exploration(1.0, 0.0, anneal_frames=1)(0) == 1.0  # one frame of annealing still starts at start
    assert LinearDecay(updates=1, final_fraction=0.0)(1) == 0.0


def test_planned_updates_count_frames_after_learning_starts():
    learner = DQN(DISCRETE, Exploration(0.1), hidden=(8,), learning_starts=200, update_to_data=0.5)
    assert learner.planned_updates(1000) == 400
    assert learner.planned_updates(100) == 0
    eager = DQN(DISCRETE, Exploration(0.1), hidden=(8,), learning_starts=200, update_to_data=2.0)
    assert eager.planned_updates(150) == 0 and eager.planned_updates(300) == 200


def learner_with_replay(stored: int, **kwargs) -> DQN:
    learner = DQN(DISCRETE, Exploration(0.1), hidden=(8,), batch_size=4, **kwargs)
    attach_trainer(learner)
    replay = UniformReplay(100)
    replay.extend(random_sample(DISCRETE, size=stored).batch)
    learner.experience.sampling = replay
    learner.update = lambda sample: {"loss_value": torch.tensor(1.0)}
    return learner


def test_updates_wait_for_learning_starts_and_a_full_batch():
    learner = learner_with_replay(16, learning_starts=10, update_to_data=1.0)
    learner.frames = 9
    assert learner.learn(None, new_frames=1) == {} and learner.learner_steps == 0
    learner.frames = 10  # learning starts at exactly learning_starts frames
    learner.learn(None, new_frames=1)
    assert learner.learner_steps == 1
    short = learner_with_replay(3, learning_starts=0, update_to_data=1.0)  # fewer than batch_size
    short.frames = 50
    assert short.learn(None, new_frames=1) == {} and short.learner_steps == 0


def test_update_debt_carries_over_between_batches():
    learner = learner_with_replay(16, learning_starts=0, update_to_data=0.5)
    learner.frames = 20
    learner.learn(None, new_frames=1)
    assert learner.learner_steps == 0  # half an update owed
    learner.learn(None, new_frames=1)
    assert learner.learner_steps == 1
    learner.learn(None, new_frames=4)
    assert learner.learner_steps == 3


def test_more_defaults_are_the_papers():
    from actorq.algos.sac import SAC

    ddpg = DDPG(CONTINUOUS, Exploration(0.1), actor_hidden=(8,), critic_hidden=(8,))
    assert (ddpg.actor_lr, ddpg.critic_lr) == (1e-3, 1e-3)
    assert (ddpg.gamma, ddpg.n_step, ddpg.batch_size, ddpg.learning_starts, ddpg.target_tau,
            ddpg.target_update_period) == (0.99, 1, 256, 1000, 0.005, 1)
    sac = SAC(CONTINUOUS, actor_hidden=(8,), critic_hidden=(8,))
    assert (sac.actor_lr, sac.critic_lr, sac.alpha_lr) == (3e-4, 3e-4, 3e-4)  # Haarnoja et al.
    assert sac.target_entropy == -1.0  # -action_dim
    assert sac.exploration(0) == 0.0  # actors sample from the policy: no added noise


def test_actor_critic_learners_keep_their_exploration_and_critic_layout():
    from actorq.algos.sac import SAC

    schedule = Exploration(0.3, 0.1, 10)
    assert DDPG(CONTINUOUS, schedule, actor_hidden=(8,), critic_hidden=(8,)).exploration is schedule
    assert SAC(CONTINUOUS, schedule, actor_hidden=(8,), critic_hidden=(8,)).exploration is schedule
    normed = DDPG(CONTINUOUS, schedule, actor_hidden=(8,), critic_hidden=(8,), critic_layer_norm=True)
    plain = DDPG(CONTINUOUS, schedule, actor_hidden=(8,), critic_hidden=(8,))
    assert any(isinstance(m, torch.nn.LayerNorm) for m in normed.critics[0].modules())
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in plain.critics[0].modules())


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"target_update_period": 0}, "target_update_period"), ({"gamma": float("nan")}, "gamma"),
    ({"target_tau": float("nan")}, "target_tau"), ({"final_lr_fraction": float("nan")}, "final_lr_fraction"),
    ({"actor_lr": 0.0}, "actor_lr"), ({"critic_lr": 0.0}, "critic_lr"),
])
def test_each_invalid_argument_is_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DDPG(CONTINUOUS, Exploration(0.1), actor_hidden=(8,), critic_hidden=(8,), **kwargs)


def test_sac_checks_its_temperature_rate():
    from actorq.algos.sac import SAC

    with pytest.raises(ValueError, match="alpha_lr"):
        SAC(CONTINUOUS, alpha_lr=0.0)


def test_soft_update_refuses_networks_of_different_shapes():
    from actorq.algos.off_policy import soft_update

    with pytest.raises(ValueError):
        soft_update(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)), 0.5)


def test_constant_learning_rates_need_no_scheduler():
    learner = DDPG(CONTINUOUS, Exploration(0.1), actor_hidden=(8,), critic_hidden=(8,), final_lr_fraction=1.0)
    attach_trainer(learner)
    assert not learner.trainer.lr_scheduler_configs


class IndexRecordingReplay:
    def update_priorities(self, indices, priorities):
        self.indices, self.priorities = indices, priorities


@pytest.mark.parametrize("algo", ["ddpg", "sac"])
def test_one_update_names_its_terms_and_feeds_priorities_at_the_sampled_indices(algo):
    from actorq.algos.sac import SAC

    learner = (DDPG(CONTINUOUS, Exploration(0.1), actor_hidden=(8,), critic_hidden=(8,)) if algo == "ddpg"
               else SAC(CONTINUOUS, actor_hidden=(8,), critic_hidden=(8,)))
    attach_trainer(learner)
    replay = IndexRecordingReplay()
    learner.experience.sampling = replay
    sample = random_sample(CONTINUOUS, size=16)
    sample.indices = torch.arange(100, 116)
    torch.manual_seed(0)
    metrics = learner.update(sample)
    expected = {"loss_value", "td_error", "loss_actor"} | ({"loss_alpha", "alpha", "entropy"} if algo == "sac" else set())
    assert expected <= set(metrics)
    assert torch.equal(replay.indices, torch.arange(100, 116)) and replay.priorities.shape == (16,)
    if algo == "sac":  # the entropy estimate of an untrained policy with std ~1 is positive
        assert float(metrics["entropy"]) > 0


def test_actor_critic_updates_are_not_clipped_by_default():
    learner = DDPG(CONTINUOUS, Exploration(0.1), actor_hidden=(8,), critic_hidden=(8,))
    attach_trainer(learner)
    sample = random_sample(CONTINUOUS)
    sample.batch["reward"] = sample.batch["reward"] * 1000  # a TD error far above any clip
    learner.update(sample)
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in learner.critics.parameters()]))
    assert float(norm) > 10


def test_dqns_n_step_left_null_is_one_on_frames_and_three_on_vectors_and_more_on_frames_is_refused():
    """``algo=dqn`` with any env: ``n_step: null`` fits the replay (a replay of frames stores
    one-step transitions), so ``env=ALE/Pong-v5`` trains with the default algorithm; an
    ``n_step`` above 1 on frames is refused when the learner is built, before any process."""
    from actorq.algos.dqn import DQN
    from actorq.envs import EnvSpec
    from actorq.util.errors import ConfigError

    frames = EnvSpec(obs_dim=4 * 84 * 84, discrete=True, num_actions=4, frame_shape=(4, 84, 84))
    vectors = EnvSpec(obs_dim=4, discrete=True, num_actions=2)
    assert DQN(frames, Exploration(0.1), n_step=None).n_step == 1
    assert DQN(vectors, Exploration(0.1), hidden=(8,), n_step=None).n_step == 3
    with pytest.raises(ConfigError, match="set algo.n_step=1 .or null., not 3"):
        DQN(frames, Exploration(0.1), n_step=3)
