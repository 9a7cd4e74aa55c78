"""Target-network math with target weights that differ from the online ones.

A freshly built learner's target networks are deep copies of its online networks, so a
test on one cannot tell "target" from "online". Every test here first moves the target
weights away (:func:`perturb`), checks that the two now give different numbers where the
formula depends on which one is used, and then compares the learner with the paper's
formula written out by hand.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from actorq.algos.base import Exploration
from actorq.algos.d4pg import D4PG
from actorq.algos.ddpg import DDPG
from actorq.algos.dqn import DQN
from actorq.algos.sac import SAC
from actorq.algos.td3 import TD3
from actorq.algos.batches import Sample
from tests.helpers import CONTINUOUS, DISCRETE, attach_trainer
from tests.unit.test_d4pg import brute_force_projection

GAMMA = 0.9  # the learner's gamma: targets must use the batch's own discount, not this
SIZE = 64


def perturb(*modules: torch.nn.Module, scale: float = 0.5, seed: int = 1) -> None:
    """Adds Gaussian noise to every parameter of ``modules`` (in place)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in modules:
            for parameter in module.parameters():
                parameter.add_(torch.randn(parameter.shape, generator=generator) * scale)


def batch_of(spec, size: int = SIZE, seed: int = 0) -> Sample:
    """Random transitions whose per-row discounts vary, a quarter of them terminal (0)."""
    from tensordict import TensorDict

    generator = torch.Generator().manual_seed(seed)
    action = (torch.randint(spec.num_actions, (size,), generator=generator) if spec.discrete
              else torch.rand(size, spec.action_dim, generator=generator) * 4 - 2)
    discount = torch.rand(size, generator=generator) * 0.5 + 0.4  # in [0.4, 0.9], never GAMMA**k
    discount[::4] = 0.0
    batch = TensorDict(
        {"observation": torch.randn(size, spec.obs_dim, generator=generator), "action": action,
         "reward": torch.randn(size, generator=generator) * 3,
         "next_observation": torch.randn(size, spec.obs_dim, generator=generator) * 2,
         "discount": discount},
        batch_size=[size],
    )
    weights = torch.rand(size, generator=generator) + 0.25
    return Sample(batch, torch.arange(size), weights)


def differ(a: torch.Tensor, b: torch.Tensor) -> bool:
    return not torch.allclose(a, b, atol=1e-4)


# --- DQN -------------------------------------------------------------------------------


def make_dqn(**kwargs) -> DQN:
    torch.manual_seed(0)
    learner = DQN(DISCRETE, Exploration(0.1), hidden=(32,), gamma=GAMMA, **kwargs)
    perturb(learner.q_target, scale=1.0)
    return learner


def test_dqn_double_target_picks_online_argmax_and_evaluates_with_the_target():
    learner = make_dqn()  # double DQN is the default
    batch = batch_of(DISCRETE).batch
    with torch.no_grad():
        online = learner.q_network(batch["next_observation"])
        target = learner.q_target(batch["next_observation"])
    best_online, best_target = online.argmax(-1), target.argmax(-1)
    assert (best_online != best_target).any()  # the two rules pick differently on this batch
    rows = torch.arange(SIZE)
    expected = batch["reward"] + batch["discount"] * target[rows, best_online]
    assert torch.allclose(learner.td_target(batch), expected)
    # terminal rows are the reward alone
    assert torch.equal(learner.td_target(batch)[::4], batch["reward"][::4])


def test_dqn_without_double_takes_the_target_max():
    learner = make_dqn(double=False)
    batch = batch_of(DISCRETE).batch
    with torch.no_grad():
        target = learner.q_target(batch["next_observation"])
    expected = batch["reward"] + batch["discount"] * target.max(-1).values
    assert torch.allclose(learner.td_target(batch), expected)


def test_dqn_breakout_takes_rl_zoos_plain_dqn_target(make_cfg):
    """``dqn_breakout`` has RL Zoo's DQN Atari settings, which are SB3's DQN: no double-DQN
    target, the target network's own max."""
    from actorq.envs import EnvSpec
    from actorq.run.build import build_learner

    frames = (4, 84, 84)
    spec = EnvSpec(obs_dim=math.prod(frames), discrete=True, num_actions=4, frame_shape=frames)
    learner = build_learner(make_cfg("+experiment=dqn_breakout").algo, spec, "breakout")
    perturb(learner.q_target, scale=0.05)
    generator = torch.Generator().manual_seed(0)
    next_frames = torch.randint(0, 256, (SIZE, *frames), dtype=torch.uint8, generator=generator)
    batch = {"next_observation": next_frames, "reward": torch.randn(SIZE, generator=generator),
             "discount": torch.full((SIZE,), 0.99)}
    with torch.no_grad():
        online, target = learner.q_network(next_frames), learner.q_target(next_frames)
    assert (online.argmax(-1) != target.argmax(-1)).any()  # double DQN would take other values
    expected = batch["reward"] + batch["discount"] * target.max(-1).values
    assert torch.allclose(learner.td_target(batch), expected)


def test_dqn_loss_is_the_weighted_huber_of_online_q_against_the_double_target():
    learner = make_dqn()
    attach_trainer(learner)
    sample = batch_of(DISCRETE)
    batch = sample.batch
    with torch.no_grad():
        q = learner.q_network(batch["observation"])[torch.arange(SIZE), batch["action"]]
        online_next = learner.q_network(batch["next_observation"])
        target_next = learner.q_target(batch["next_observation"])
        y = batch["reward"] + batch["discount"] * target_next[torch.arange(SIZE), online_next.argmax(-1)]
        error = q - y
        huber = torch.where(error.abs() < 1, 0.5 * error**2, error.abs() - 0.5)
        expected = (sample.weights * huber).mean()
    metrics = learner.update(sample)
    assert float(metrics["loss_value"]) == pytest.approx(float(expected), rel=1e-5)
    assert float(metrics["q_mean"]) == pytest.approx(float(q.mean()), rel=1e-5, abs=1e-6)
    assert torch.allclose(learner.experience.replay.priorities, error.abs(), atol=1e-5)


# --- DDPG ------------------------------------------------------------------------------


def make_ddpg(cls=DDPG, **kwargs):
    torch.manual_seed(0)
    learner = cls(CONTINUOUS, Exploration(0.1), actor_hidden=(32,), critic_hidden=(32,), gamma=GAMMA, **kwargs)
    perturb(learner.actor_target, learner.critics_target, scale=1.0)
    return learner


def test_ddpg_target_uses_the_target_actor_and_the_target_critic():
    learner = make_ddpg()
    batch = batch_of(CONTINUOUS).batch
    s2 = batch["next_observation"]
    with torch.no_grad():
        target_action, online_action = learner.actor_target(s2), learner.actor(s2)
        expected = batch["reward"] + batch["discount"] * learner.critics_target[0](s2, target_action)
        with_online_actor = batch["reward"] + batch["discount"] * learner.critics_target[0](s2, online_action)
        with_online_critic = batch["reward"] + batch["discount"] * learner.critics[0](s2, target_action)
    assert differ(expected, with_online_actor) and differ(expected, with_online_critic)
    assert torch.allclose(learner.td_target(batch), expected)


def test_ddpg_critic_loss_is_the_weighted_squared_td_error_of_the_online_critic():
    learner = make_ddpg()
    sample = batch_of(CONTINUOUS)
    batch = sample.batch
    with torch.no_grad():
        s2 = batch["next_observation"]
        y = batch["reward"] + batch["discount"] * learner.critics_target[0](s2, learner.actor_target(s2))
        td = learner.critics[0](batch["observation"], batch["action"]) - y
        expected = (sample.weights * td**2).mean()
    loss, td_error = learner.critic_loss(sample)
    assert torch.allclose(loss, expected) and torch.allclose(td_error, td, atol=1e-5)


def test_ddpg_actor_loss_ascends_the_online_critic_at_the_online_action():
    learner = make_ddpg()
    observation = batch_of(CONTINUOUS).batch["observation"]
    with torch.no_grad():
        expected = -learner.critics[0](observation, learner.actor(observation)).mean()
        with_target_critic = -learner.critics_target[0](observation, learner.actor(observation)).mean()
    assert differ(expected, with_target_critic)
    assert torch.allclose(learner.actor_loss(observation), expected)


@pytest.mark.parametrize("tau", [0.1, 0.7])
def test_update_targets_moves_every_target_by_tau_toward_its_online_network(tau):
    learner = make_ddpg(target_tau=tau)
    pairs = [(learner.actor_target, learner.actor), (learner.critics_target, learner.critics)]
    before = [[(t.detach().clone(), o.detach().clone()) for t, o in zip(target.parameters(), online.parameters())]
              for target, online in pairs]
    learner.update_targets()
    for (target, online), params in zip(pairs, before):
        for new, (old_target, old_online) in zip(target.parameters(), params):
            assert torch.allclose(new, tau * old_online + (1 - tau) * old_target, atol=1e-6)
        for now, (_, old_online) in zip(online.parameters(), params):
            assert torch.equal(now, old_online)  # the online network is untouched


def test_targets_follow_after_every_target_update_period_updates():
    learner = make_ddpg(target_tau=0.5, target_update_period=3, learning_starts=0, batch_size=SIZE)
    attach_trainer(learner)
    from actorq.data.replay.uniform import UniformReplay

    replay = UniformReplay(1000)
    replay.extend(batch_of(CONTINUOUS).batch)
    learner.experience.sampling = replay
    learner.frames = 10
    moved = []
    for _ in range(6):
        before = learner.actor_target.trunk[0].weight.detach().clone()
        learner.learn(None, new_frames=1)
        moved.append(not torch.equal(before, learner.actor_target.trunk[0].weight))
    assert moved == [False, False, True, False, False, True]


# --- TD3 -------------------------------------------------------------------------------


def test_td3_target_is_the_smaller_twin_at_the_smoothed_target_action():
    learner = make_ddpg(TD3, target_noise=0.6, target_noise_clip=0.5)
    batch = batch_of(CONTINUOUS).batch
    s2 = batch["next_observation"]
    torch.manual_seed(7)
    got = learner.td_target(batch)
    torch.manual_seed(7)
    with torch.no_grad():
        mu = learner.actor_target(s2)
        noise = (torch.randn(mu.shape) * 0.6).clamp(-0.5, 0.5) * 2.0  # fraction of the half range 2
        action = (mu + noise).clamp(-2.0, 2.0)
        q1, q2 = (q(s2, action) for q in learner.critics_target)
        expected = batch["reward"] + batch["discount"] * torch.min(q1, q2)
        # guards: each piece of the formula changes the number on this batch
        online_action = (learner.actor(s2) + noise).clamp(-2.0, 2.0)
        with_online_actor = torch.min(*(q(s2, online_action) for q in learner.critics_target))
        with_online_critics = torch.min(*(q(s2, action) for q in learner.critics))
        unclipped = torch.min(*(q(s2, (mu + torch.randn(mu.shape) * 1.2).clamp(-2, 2)) for q in learner.critics_target))
    assert (q1 < q2).any() and (q2 < q1).any()
    assert differ(with_online_actor, torch.min(q1, q2)) and differ(with_online_critics, torch.min(q1, q2))
    assert differ(unclipped, torch.min(q1, q2))
    assert torch.allclose(got, expected, atol=1e-5)


def test_td3_critic_loss_sums_both_twins_against_one_target():
    learner = make_ddpg(TD3, target_noise=0.0)
    sample = batch_of(CONTINUOUS)
    batch = sample.batch
    s2 = batch["next_observation"]
    with torch.no_grad():
        action = learner.actor_target(s2)
        y = batch["reward"] + batch["discount"] * torch.min(*(q(s2, action) for q in learner.critics_target))
        tds = [q(batch["observation"], batch["action"]) - y for q in learner.critics]
        expected = sum((sample.weights * td**2).mean() for td in tds)
    loss, td_error = learner.critic_loss(sample)
    assert torch.allclose(loss, expected) and torch.allclose(td_error, tds[0], atol=1e-5)


def test_td3_delays_target_updates_to_the_actor_period():
    learner = make_ddpg(TD3, policy_delay=3)
    assert learner.target_update_period == 3


# --- SAC -------------------------------------------------------------------------------


def make_sac(**kwargs) -> SAC:
    torch.manual_seed(0)
    learner = SAC(CONTINUOUS, actor_hidden=(32,), critic_hidden=(32,), gamma=GAMMA, init_alpha=0.3, **kwargs)
    perturb(learner.critics_target, scale=1.0)
    return learner


def squashed_sample(learner: SAC, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``a = 2 tanh(u)``, ``u ~ N(mean, std)`` of the ONLINE policy, and ``log pi(a|s)`` by the
    change of variables (``log N(u) - log(2 (1 - tanh(u)^2))``)."""
    out = learner.actor.trunk(observation)
    mean, log_std = out.chunk(2, dim=-1)
    gaussian = torch.distributions.Normal(mean, log_std.clamp(-5.0, 2.0).exp())
    u = gaussian.rsample()
    log_prob = (gaussian.log_prob(u) - torch.log(2.0 * (1 - torch.tanh(u) ** 2) + 1e-12)).sum(-1)
    return 2.0 * torch.tanh(u), log_prob


def test_sac_target_is_the_soft_value_of_the_target_twins_at_an_online_policy_sample():
    learner = make_sac()
    batch = batch_of(CONTINUOUS).batch
    s2 = batch["next_observation"]
    torch.manual_seed(3)
    got = learner.td_target(batch)
    torch.manual_seed(3)
    with torch.no_grad():
        action, log_prob = squashed_sample(learner, s2)
        q1, q2 = (q(s2, action) for q in learner.critics_target)
        expected = batch["reward"] + batch["discount"] * (torch.min(q1, q2) - 0.3 * log_prob)
        with_online_critics = torch.min(*(q(s2, action) for q in learner.critics))
    assert (q1 < q2).any() and (q2 < q1).any()
    assert differ(with_online_critics, torch.min(q1, q2))
    assert torch.allclose(got, expected, atol=1e-4)


def test_sac_actor_loss_uses_the_online_twins_and_the_temperature():
    learner = make_sac()
    observation = batch_of(CONTINUOUS).batch["observation"]
    torch.manual_seed(5)
    loss, returned_log_prob = learner.actor_loss(observation)
    torch.manual_seed(5)
    with torch.no_grad():
        action, log_prob = squashed_sample(learner, observation)
        q = torch.min(*(critic(observation, action) for critic in learner.critics))
        expected = (0.3 * log_prob - q).mean()
        with_target_critics = (0.3 * log_prob - torch.min(*(c(observation, action) for c in learner.critics_target))).mean()
    assert differ(expected, with_target_critics)
    assert torch.allclose(loss, expected, atol=1e-4)
    assert torch.allclose(returned_log_prob, log_prob, atol=1e-4)


def test_sac_alpha_loss_is_minus_log_alpha_times_the_entropy_gap():
    learner = make_sac(target_entropy=-0.5)
    log_prob = torch.tensor([0.2, -1.0, 3.0])
    expected = -(math.log(0.3) * (log_prob + -0.5)).mean()
    assert float(learner.alpha_loss(log_prob).detach()) == pytest.approx(float(expected), rel=1e-6)


def test_sac_critic_loss_sums_both_twins():
    learner = make_sac()
    sample = batch_of(CONTINUOUS)
    torch.manual_seed(11)
    loss, td_error = learner.critic_loss(sample)
    torch.manual_seed(11)
    y = learner.td_target(sample.batch)
    with torch.no_grad():
        tds = [q(sample.batch["observation"], sample.batch["action"]) - y for q in learner.critics]
        expected = sum((sample.weights * td**2).mean() for td in tds)
    assert torch.allclose(loss, expected, atol=1e-5) and torch.allclose(td_error, tds[0], atol=1e-5)


def test_sac_update_targets_moves_only_the_critics():
    learner = make_sac(target_tau=0.25)
    old_target = [p.detach().clone() for p in learner.critics_target.parameters()]
    learner.update_targets()
    for new, old, online in zip(learner.critics_target.parameters(), old_target, learner.critics.parameters()):
        assert torch.allclose(new, 0.25 * online + 0.75 * old, atol=1e-6)


# --- D4PG ------------------------------------------------------------------------------


def make_d4pg(**kwargs) -> D4PG:
    torch.manual_seed(0)
    learner = D4PG(CONTINUOUS, Exploration(0.3), actor_hidden=(32,), critic_hidden=(32,), num_atoms=11,
                   v_min=-10.0, v_max=10.0, gamma=GAMMA, **kwargs)
    perturb(learner.actor_target, learner.critics_target, scale=1.0)
    return learner


def test_d4pg_target_projects_the_target_critic_at_the_target_action():
    learner = make_d4pg()
    batch = batch_of(CONTINUOUS).batch
    s2 = batch["next_observation"]
    atoms = torch.linspace(-10.0, 10.0, 11)
    with torch.no_grad():
        probs = learner.critics_target[0](s2, learner.actor_target(s2)).softmax(-1)
        with_online_actor = learner.critics_target[0](s2, learner.actor(s2)).softmax(-1)
        with_online_critic = learner.critics[0](s2, learner.actor_target(s2)).softmax(-1)
    assert differ(probs, with_online_actor) and differ(probs, with_online_critic)
    expected = brute_force_projection(atoms, probs, batch["reward"], batch["discount"])
    assert torch.allclose(learner.td_target(batch), expected, atol=1e-5)


def test_d4pg_critic_loss_is_the_weighted_cross_entropy_to_the_projected_target():
    learner = make_d4pg()
    sample = batch_of(CONTINUOUS)
    batch = sample.batch
    s2 = batch["next_observation"]
    atoms = torch.linspace(-10.0, 10.0, 11)
    with torch.no_grad():
        probs = learner.critics_target[0](s2, learner.actor_target(s2)).softmax(-1)
        target = brute_force_projection(atoms, probs, batch["reward"], batch["discount"])
        log_probs = F.log_softmax(learner.critics[0](batch["observation"], batch["action"]), -1)
        cross_entropy = -(target * log_probs).sum(-1)
    loss, per_sample = learner.critic_loss(sample)
    assert torch.allclose(per_sample, cross_entropy, atol=1e-5)
    assert torch.allclose(loss, (sample.weights * cross_entropy).mean(), atol=1e-5)
