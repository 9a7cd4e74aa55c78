"""The fidelity of the actors' copy, in the policy's own terms, on held-out observations; and the
check that the actors recorded the log-probs of the version they were pushed."""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
from functools import partial

import pytest
import torch
from tensordict import TensorDict

from actorq.actors.policy import actor_policy
from actorq.callbacks.push import PolicyPush
from actorq.algos.networks import CategoricalPolicy, DeterministicActor, GaussianActor, GaussianPolicy, QNetwork
from actorq.algos.ppo import PPO
from actorq.experience import Experience, ExperienceSpec, ReplayFeed, RolloutFeed
from actorq.envs import EnvSpec
from actorq.quant import QuantizedNetwork, QuantSpec, policy_divergence
from actorq.actors.ray_pool import idle_keys
from actorq.util.clock import FrameClock
from actorq.util.errors import ConfigError

CONTINUOUS = EnvSpec(obs_dim=5, discrete=False, action_dim=2, action_low=(-2.0, -2.0), action_high=(2.0, 2.0))
DISCRETE = EnvSpec(obs_dim=5, discrete=True, num_actions=3)


def shifted(network, bias_shift: torch.Tensor):
    """A copy of ``network`` whose trunk output is moved by ``bias_shift``."""
    other = copy.deepcopy(network)
    with torch.no_grad():
        other.trunk[-1].bias += bias_shift
    return other


def test_gaussian_kl_is_exact_and_of_mu_against_pi():
    torch.manual_seed(0)
    pi = GaussianPolicy(CONTINUOUS, (16,), log_std_init=-1.0)
    mu = shifted(pi, torch.tensor([0.1, -0.3]))
    with torch.no_grad():
        mu.head.log_std.fill_(-0.5)
    # KL(N(m1, s1) || N(m2, s2)) = log(s2 / s1) + (s1^2 + (m1 - m2)^2) / (2 s2^2) - 1/2, per dimension
    s1, s2 = math.exp(-0.5), math.exp(-1.0)
    expected = sum(math.log(s2 / s1) + (s1**2 + d**2) / (2 * s2**2) - 0.5 for d in (0.1, 0.3))
    divergence = policy_divergence(pi, mu, torch.randn(64, 5), CONTINUOUS)
    assert divergence["quant/kl"] == pytest.approx(expected, rel=1e-5)
    assert divergence["quant/kl_max"] == pytest.approx(expected, rel=1e-5)  # the same at every state


def test_gaussian_kl_reads_the_unclipped_mean():
    torch.manual_seed(0)
    pi = GaussianPolicy(CONTINUOUS, (16,), log_std_init=0.0)
    with torch.no_grad():
        pi.trunk[-1].bias.fill_(5.0)  # means far beyond the action bounds (+-2): clipped they agree
    mu = shifted(pi, torch.tensor([1.0, 0.0]))
    divergence = policy_divergence(pi, mu, torch.zeros(8, 5), CONTINUOUS)
    assert divergence["quant/kl"] == pytest.approx(0.5, rel=1e-5)  # 1^2 / (2 * 1^2)


def test_categorical_kl_is_exact():
    pi = CategoricalPolicy(DISCRETE, (8,))
    with torch.no_grad():
        pi.trunk[-1].weight.zero_()
        pi.trunk[-1].bias.copy_(torch.tensor([0.0, 1.0, 2.0]))
    mu = shifted(pi, torch.tensor([1.0, 0.0, 0.0]))
    p_mu, p_pi = torch.softmax(torch.tensor([1.0, 1.0, 2.0]), 0), torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0)
    expected = float((p_mu * (p_mu / p_pi).log()).sum())
    divergence = policy_divergence(pi, mu, torch.randn(10, 5), DISCRETE)
    assert divergence["quant/kl"] == pytest.approx(expected, rel=1e-5)


def test_squashed_gaussian_kl_is_taken_before_the_squashing():
    torch.manual_seed(0)
    pi = GaussianActor(CONTINUOUS, (16,))
    with torch.no_grad():
        pi.trunk[-1].weight.zero_()
        pi.trunk[-1].bias.copy_(torch.tensor([0.0, 0.0, -1.0, -1.0]))  # means 0, log-stds -1
    mu = shifted(pi, torch.tensor([0.2, 0.0, 0.0, 0.0]))
    divergence = policy_divergence(pi, mu, torch.randn(4, 5), CONTINUOUS)
    assert divergence["quant/kl"] == pytest.approx(0.2**2 / (2 * math.exp(-2.0)), rel=1e-5)


def test_q_network_greedy_agreement():
    torch.manual_seed(0)
    pi = QNetwork(DISCRETE, (16,))
    mu = shifted(pi, torch.tensor([0.0, 0.0, 1e3]))  # always picks action 2
    observations = torch.randn(200, 5)
    expected = float((pi(observations).argmax(-1) == 2).float().mean())
    assert 0 < expected < 1
    divergence = policy_divergence(pi, mu, observations, DISCRETE)
    assert divergence == {"quant/greedy_agreement": pytest.approx(expected)}


def test_deterministic_action_error_is_a_fraction_of_the_action_range():
    torch.manual_seed(0)
    pi = DeterministicActor(CONTINUOUS, (16,))
    mu = copy.deepcopy(pi)
    with torch.no_grad():
        mu.head.center += torch.tensor([0.4, 0.0])  # range 4: errors 0.1 and 0 of it
    divergence = policy_divergence(pi, mu, torch.randn(32, 5), CONTINUOUS)
    assert divergence["quant/action_error"] == pytest.approx(0.05, rel=1e-5)
    assert divergence["quant/action_error_max"] == pytest.approx(0.05, rel=1e-5)


# ---------------------------------------------------------------- what a push measures on


def rollout_experience(learner=None) -> Experience:
    policy = None
    if learner is not None:
        policy = actor_policy(learner, QuantSpec(bits=32), torch.randn(8, DISCRETE.obs_dim))
    make_actors = partial(lambda **kwargs: None, num_workers=1, frames_per_batch=6, total_frames=60)
    return Experience(ExperienceSpec("CartPole-v1"), make_actors=make_actors, actor_policy=policy,
                      clock=FrameClock(lambda frames: 0.0), feed=RolloutFeed())


def rollout(observations: torch.Tensor, **fields) -> TensorDict:
    steps = len(observations)
    done = torch.zeros(steps, 1, dtype=torch.bool)
    return TensorDict({"observation": observations, **fields,
                       "next": {"done": done, "reward": torch.zeros(steps, 1)}}, batch_size=[steps])


def test_a_rollout_fed_push_calibrates_on_the_last_rollout_and_measures_on_the_one_before():
    torch.manual_seed(0)
    experience = rollout_experience()
    first, second = torch.arange(30.0).reshape(6, 5), 100 + torch.arange(30.0).reshape(6, 5)
    experience.receive(rollout(first))
    assert experience.calibration_and_held_out(512, 256)[1] is None  # nothing held out at the first push
    experience.receive(rollout(second))
    calibration, held_out = experience.calibration_and_held_out(512, 256)
    assert sorted(calibration[:, 0].tolist()) == sorted(second[:, 0].tolist())  # each step once
    assert sorted(held_out[:, 0].tolist()) == sorted(first[:, 0].tolist())
    sample, held_out = experience.calibration_and_held_out(4, 3)
    assert len(sample) == 4 and len(set(sample[:, 0].tolist())) == 4  # without replacement
    assert len(held_out) == 3 and len(set(held_out[:, 0].tolist())) == 3


def replay_fed(stored: int, **replay) -> Experience:
    """A replay-fed experience whose replay (``make_replay(**replay)``) holds ``stored``
    CartPole transitions, the i-th with the observation ``[i, 0, 0, 0]``."""
    from actorq.data.replay import make_replay
    from actorq.data.replay.factory import transition_template
    from actorq.envs import make_env

    make_actors = partial(lambda **kwargs: None, num_workers=1, frames_per_batch=6, total_frames=60)
    experience = Experience(ExperienceSpec("CartPole-v1"), make_actors=make_actors, actor_policy=None,
                            clock=FrameClock(lambda frames: 0.0),
                            feed=ReplayFeed(partial(make_replay, capacity=2000, **replay)))
    experience.feed.setup(0, 1, experience.make_env)
    transitions = transition_template(make_env("CartPole-v1")).expand(stored).clone()
    transitions["observation"] = torch.zeros(stored, 4)
    transitions["observation"][:, 0] = torch.arange(stored, dtype=torch.float32)
    experience.replay.extend(transitions)
    return experience


def stored_ids(observations: torch.Tensor) -> list[int]:
    return observations[:, 0].long().tolist()


@pytest.mark.parametrize("replay", [{}, {"prioritized": True}, {"shared": True}], ids=["uniform", "prioritized", "shared"])
def test_a_replay_fed_push_measures_on_observations_it_did_not_calibrate_on(replay):
    """One draw without replacement, split in two: no stored transition is calibrated on and
    held out (two independent draws of 512 and 256 out of 1000 share about 40%), none is in
    either twice, and a replay holding fewer than both gives each its share."""
    torch.manual_seed(0)
    calibration, held_out = replay_fed(1000, **replay).calibration_and_held_out(512, 256)
    calibrated, held = stored_ids(calibration), stored_ids(held_out)
    assert (len(set(calibrated)), len(set(held))) == (512, 256)
    assert not set(calibrated) & set(held)
    calibration, held_out = replay_fed(10, **replay).calibration_and_held_out(512, 256)
    assert (len(calibration), len(held_out)) == (7, 3)
    assert sorted(stored_ids(calibration) + stored_ids(held_out)) == list(range(10))


def test_the_recorded_log_prob_check_finds_steps_the_pushed_version_did_not_take():
    torch.manual_seed(0)
    learner = PPO(DISCRETE, hidden=(16,))
    experience = rollout_experience(learner)
    network = experience.actor_policy.network
    observations = torch.randn(6, DISCRETE.obs_dim)
    action, log_prob = network.sample_with_log_prob(observations)
    version = torch.zeros(6, dtype=torch.int64)
    experience.receive(rollout(observations, action=action, log_prob=log_prob, policy_version=version))
    assert experience.log_prob_error == pytest.approx(0.0, abs=1e-6)
    off = log_prob.clone()
    off[3] += 0.5
    experience.receive(rollout(observations, action=action, log_prob=off, policy_version=version))
    assert experience.log_prob_error == pytest.approx(0.5, rel=1e-4)
    experience.receive(rollout(observations, action=action, log_prob=off, policy_version=version + 1))
    assert experience.log_prob_error is None  # no step ran the version pushed last


def warnings_of(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]


def test_a_recorded_log_prob_beyond_the_bound_warns_once_naming_the_worker(caplog):
    """Float rounding passes; a worker whose recorded log-probs are 0.05 nats or more off (its
    int8 kernels saturating, say) is named once, however often it happens again."""
    torch.manual_seed(0)
    learner = PPO(DISCRETE, hidden=(16,))
    experience = rollout_experience(learner)
    network = experience.actor_policy.network
    observations = torch.randn(2, 3, DISCRETE.obs_dim)  # [envs, T]: one env in each of workers 0 and 1
    action, log_prob = (torch.stack(columns, 1) for columns in
                        zip(*(network.sample_with_log_prob(observations[:, t]) for t in range(3)), strict=True))

    def receive(offset: float, row: int):
        recorded = log_prob.clone()
        recorded[row, 1] += offset
        experience.receive(TensorDict({"observation": observations, "action": action, "log_prob": recorded,
                                       "worker": torch.tensor([[0] * 3, [1] * 3]),
                                       "policy_version": torch.zeros(2, 3, dtype=torch.int64),
                                       "next": {"done": torch.zeros(2, 3, 1, dtype=torch.bool),
                                                "reward": torch.zeros(2, 3, 1)}}, batch_size=[2, 3]))

    with caplog.at_level(logging.WARNING, logger="actorq.experience.pipeline"):
        receive(0.04, row=0)
        assert experience.log_prob_error == pytest.approx(0.04, rel=1e-3) and not warnings_of(caplog)
        receive(0.5, row=1)
        receive(0.7, row=0)
    assert experience.log_prob_error == pytest.approx(0.7, rel=1e-3)
    [warning] = warnings_of(caplog)
    assert warning.startswith("actor worker 1 recorded log-probabilities up to 0.5 nats away")


def test_a_recorded_output_beyond_the_bound_warns_once_naming_the_worker(caplog):
    """An output off by less than a percent of the outputs' scale passes; one beyond it names
    its worker, once."""
    from actorq.algos.base import Exploration
    from actorq.algos.td3 import TD3

    torch.manual_seed(0)
    learner = TD3(CONTINUOUS, Exploration(0.5), actor_hidden=(16,), critic_hidden=(16,))
    experience = replay_experience(learner, QuantSpec(bits=32))
    batch = actor_batch(experience.actor_policy, torch.randn(2, 3, 5))
    batch["worker"][1] = 1
    scale = float(batch["output"].abs().max())
    with caplog.at_level(logging.WARNING, logger="actorq.experience.pipeline"):
        for offset, row in ((0.005, 0), (0.05, 1), (0.5, 0)):
            off = batch.clone()
            off["output"][row, 1, 0] += offset * scale
            experience._output_probe = experience.actor_policy.network.built()._replace(policy_version=torch.tensor(1))
            experience.receive(off)
            assert experience.output_error == pytest.approx(offset * scale, rel=1e-3)
            assert len(warnings_of(caplog)) == (offset > 0.01)
    assert warnings_of(caplog)[0].startswith("actor worker 1 recorded network outputs up to")


def test_a_dynamic_copy_is_measured_at_the_batch_the_actors_run_it_at():
    """Its activation ranges are its batch's: one observation at a time, as one-env actors run it."""
    torch.manual_seed(0)
    pi = GaussianPolicy(CONTINUOUS, (64, 64), log_std_init=-2.0)
    mu = QuantizedNetwork.from_network(pi, QuantSpec(bits=8, mode="dynamic"))
    observations = torch.randn(32, 5) * torch.logspace(-1, 1, 32).unsqueeze(1)  # rows of very different scales
    one_by_one = [policy_divergence(pi, mu, row.unsqueeze(0), CONTINUOUS)["quant/kl"] for row in observations]
    batched = policy_divergence(pi, mu, observations, CONTINUOUS, batch_size=1)
    assert batched["quant/kl"] == pytest.approx(sum(one_by_one) / len(one_by_one), rel=1e-4)
    assert policy_divergence(pi, mu, observations, CONTINUOUS)["quant/kl"] != pytest.approx(batched["quant/kl"])


def test_the_check_recomputes_each_step_in_the_batch_the_actors_ran_it_in():
    """A dynamic copy's log-probs depend on the batch: each step is recomputed with the other
    envs of its worker at the same time step, as the actors ran it."""
    torch.manual_seed(0)
    learner = PPO(CONTINUOUS, hidden=(32, 32), log_std_init=-2.0)
    policy = actor_policy(learner, QuantSpec(bits=8, mode="dynamic"), torch.randn(8, CONTINUOUS.obs_dim))
    experience = rollout_experience()
    experience.actor_policy = policy
    scales = torch.tensor([0.1, 10.0, 1.0, 30.0]).reshape(4, 1, 1)
    observations = torch.randn(4, 3, CONTINUOUS.obs_dim) * scales  # [envs, T]: very different ranges
    worker = torch.tensor([0, 0, 1, 1]).unsqueeze(1).expand(4, 3)
    actions, log_probs = torch.empty(4, 3, 2), torch.empty(4, 3)
    for t in range(3):
        for rows in (slice(0, 2), slice(2, 4)):  # each worker steps its two envs together
            actions[rows, t], log_probs[rows, t] = policy.network.sample_with_log_prob(observations[rows, t])
    batch = TensorDict({"observation": observations, "action": actions, "log_prob": log_probs, "worker": worker,
                        "policy_version": torch.zeros(4, 3, dtype=torch.int64),
                        "next": {"done": torch.zeros(4, 3, 1, dtype=torch.bool), "reward": torch.zeros(4, 3, 1)}},
                       batch_size=[4, 3])
    experience.receive(batch)
    assert experience.log_prob_error < 1e-5
    network = policy.network  # the same steps recomputed all at once differ
    together = network.head.log_prob(network.features(observations.reshape(12, -1)), actions.reshape(12, 2))
    assert (together - log_probs.reshape(12)).abs().max() > 1e-3


def replay_experience(learner, quant: QuantSpec) -> Experience:
    """A replay-fed experience (no replay: the check reads each batch as it arrives) whose
    actors' copy is ``learner``'s at ``quant``, with that copy held as pushed version 1."""
    policy = actor_policy(learner, quant, torch.randn(64, learner.spec.obs_dim))
    make_actors = partial(lambda **kwargs: None, num_workers=1, frames_per_batch=6, total_frames=60)
    experience = Experience(ExperienceSpec("Pendulum-v1"), make_actors=make_actors, actor_policy=policy,
                            clock=FrameClock(lambda frames: 0.0), feed=ReplayFeed(None))
    experience._output_probe = policy.network.built()._replace(policy_version=torch.tensor(1))
    return experience


def actor_batch(policy, observations: torch.Tensor, version: int = 1) -> TensorDict:
    """What one actor worker hands over for ``observations`` ``[envs, T, obs_dim]``: its policy
    run on all envs at each time step, with the records the off-policy family asks for."""
    envs, steps = observations.shape[:2]
    columns = [policy(observations[:, t]) for t in range(steps)]
    action, output = (torch.stack([column[i] for column in columns], 1) for i in (0, 1))
    return TensorDict({"observation": observations, "action": action, "output": output,
                       "policy_version": torch.full((envs, steps), version),
                       "worker": torch.zeros(envs, steps, dtype=torch.int64),
                       "next": {"done": torch.zeros(envs, steps, 1, dtype=torch.bool),
                                "reward": torch.zeros(envs, steps, 1)}}, batch_size=[envs, steps])


@pytest.mark.parametrize("family", ["td3", "dqn"])
def test_off_policy_actors_record_the_output_the_pushed_version_computes(family):
    """A deterministic actor's action before its noise, or a Q-network's values: recomputed by
    the learner's copy of the version, at the batch the actors ran (a dynamic copy's ranges
    are its batch's), they agree to float rounding; a step that disagrees is found."""
    from actorq.algos.base import Exploration
    from actorq.algos.dqn import DQN
    from actorq.algos.td3 import TD3

    torch.manual_seed(0)
    learner = (TD3(CONTINUOUS, Exploration(0.5), actor_hidden=(32, 32), critic_hidden=(32,)) if family == "td3"
               else DQN(DISCRETE, Exploration(0.5), hidden=(32, 32)))  # the middle layer is int8
    quant = QuantSpec(bits=8, mode="dynamic")
    experience = replay_experience(learner, quant)
    policy = experience.actor_policy
    assert policy.records == ("output", "policy_version", "worker")
    scales = torch.tensor([0.1, 10.0, 1.0, 30.0]).reshape(1, 4, 1)
    batch = actor_batch(policy, torch.randn(3, 4, 5) * scales)  # time steps of very different ranges
    if family == "td3":  # the action is the output plus exploration noise
        assert (batch["action"] - batch["output"]).abs().max() > 0.1
    experience.receive(batch)
    assert experience.output_error is not None and experience.output_error < 1e-5
    assert experience._output_probe is None  # checked: the next push holds the next probe
    network = policy.network  # the same steps recomputed all at once differ
    together = network(batch["observation"].reshape(12, 5))
    assert (together - batch["output"].reshape(12, -1)).abs().max() > 1e-3

    wrong = batch.clone()
    wrong["output"][1, 2, 0] += 0.25
    experience = replay_experience(learner, quant)
    experience.actor_policy = policy
    experience.receive(wrong)
    assert experience.output_error == pytest.approx(0.25, abs=1e-5)


def test_the_output_check_waits_for_the_probed_version_and_drops_it_once_the_actors_are_past_it():
    """Replay batches arrive versions after they were collected."""
    from actorq.algos.base import Exploration
    from actorq.algos.td3 import TD3

    torch.manual_seed(0)
    learner = TD3(CONTINUOUS, Exploration(0.5), actor_hidden=(16,), critic_hidden=(16,))
    experience = replay_experience(learner, QuantSpec(bits=32))
    batch = actor_batch(experience.actor_policy, torch.randn(2, 3, 5))
    bad = batch.clone()
    bad["output"] += 1.0
    bad["policy_version"].zero_()  # older than the probe (version 0's random frames record zeros)
    experience.receive(bad)
    assert experience.output_error is None and experience._output_probe is not None  # still waiting
    experience.receive(batch)
    assert experience.output_error < 1e-6
    experience = replay_experience(learner, QuantSpec(bits=32))
    bad["policy_version"][0].fill_(2)  # one env's worker is past it, the other's may still run it
    experience.receive(bad)
    assert experience._output_probe is not None
    bad["policy_version"].fill_(2)  # the actors are past the probed version: it never comes
    experience.receive(bad)
    assert experience.output_error is None and experience._output_probe is None


# ---------------------------------------------------------------- the divergence budget


def budget_experience(quant: QuantSpec, learner) -> Experience:
    """A rollout-fed experience whose actors' copy is ``learner``'s at ``quant``, with two
    rollouts received (a calibration set and a held-out one) and a pool that takes pushes."""
    experience = rollout_experience()
    experience.actor_policy = actor_policy(learner, quant, torch.randn(8, CONTINUOUS.obs_dim))
    experience.actors = _Pushes()
    states = torch.Generator().manual_seed(1)  # the same rollouts for every experience
    for _ in range(2):
        experience.receive(rollout(torch.randn(64, CONTINUOUS.obs_dim, generator=states) * 3))
    return experience


class _Pushes:
    """The pool's push, counted (the workers' side of a push is tested with real workers)."""

    def __init__(self):
        self.pushes = 0

    def push(self, policy) -> None:
        self.pushes += 1


def test_a_push_over_the_kl_budget_goes_out_at_the_first_fallback_that_meets_it():
    torch.manual_seed(0)
    learner = PPO(CONTINUOUS, hidden=(64, 64), log_std_init=-3.0)  # a narrow policy: int8's KL is large
    int8 = QuantSpec(bits=8, mode="dynamic", fallback_bits=(16, 32))
    measured = budget_experience(int8, learner)
    kl_int8 = measured._copy_divergence(learner.behaviour_network, 0, measured.actor_policy.network.payload(0),
                                        measured.calibration_and_held_out(512, 256)[1])["quant/kl"]
    assert kl_int8 > 0
    fp32_actors = budget_experience(QuantSpec(bits=32), learner).push(learner.behaviour_network)
    for max_kl, rung, describe in ((kl_int8 * 2, 0, "int8 dynamic per_channel fp32-ends"),
                                   (kl_int8 / 2, 1, "bf16"), (1e-30, 2, "fp32")):
        experience = budget_experience(dataclasses.replace(int8, max_kl=max_kl), learner)
        pushed = experience.push(learner.behaviour_network)
        network = experience.actor_policy.network
        assert (pushed.rung, network.active_quant.describe()) == (rung, describe)
        assert pushed.budget_kl == pytest.approx(kl_int8, rel=1e-4)  # the actors' own precision's
        # what the actors now run is that precision's copy: fp32's is the policy itself
        observations = torch.randn(16, CONTINUOUS.obs_dim)
        if rung == 2:
            assert torch.equal(network(observations), learner.behaviour_network(observations))
        assert experience.actors.pushes == 1
    assert (fp32_actors.rung, fp32_actors.budget_kl) == (0, None)  # nothing above fp32: nothing measured


def test_a_push_logs_the_kl_of_the_actors_own_precision_measured_once_also_after_a_fallback(monkeypatch):
    """The push logs the budget's measurement of the int8 copy rather than measuring it again;
    after a fallback too, so neither its ``quant/kl`` nor the summary's mean turns into the fp32
    copy's 0, while the payload metrics are the copy's that went out."""
    import actorq.quant.fidelity as fidelity

    measured_again = []
    measure = fidelity.policy_divergence
    monkeypatch.setattr(fidelity, "policy_divergence", lambda *args: measured_again.append(1) or measure(*args))
    torch.manual_seed(0)
    learner = PPO(CONTINUOUS, hidden=(64, 64), log_std_init=-3.0)
    int8 = QuantSpec(bits=8, mode="dynamic", fallback_bits=(16, 32))
    logged, summaries = {}, {}
    for max_kl, rung in ((1.0, 0), (1e-30, 2)):
        experience = budget_experience(dataclasses.replace(int8, max_kl=max_kl), learner)
        push = PolicyPush()
        logged[rung] = push.push(experience, learner)
        summaries[rung] = push.summary_fields()["fidelity"]
        actors = experience.actor_policy.network
        assert actors.rungs.index(actors.active_quant) == rung and not measured_again
    own = logged[0]["quant/kl"]  # the int8 copy's on the same held-out rollout
    assert own > 0 and logged[2]["quant/fallback"] == 1.0
    assert {name: logged[2][name] for name in ("quant/kl", "quant/kl_max")} == pytest.approx(
        {name: logged[0][name] for name in ("quant/kl", "quant/kl_max")}, rel=1e-6)
    assert summaries[2]["kl"]["mean"] == pytest.approx(own, rel=1e-6)
    assert logged[0]["quant/compression"] < 1 == logged[2]["quant/compression"]  # the fp32 copy went out


def test_without_a_budget_or_a_kl_nothing_is_measured_and_nothing_falls_back():
    torch.manual_seed(0)
    learner = PPO(CONTINUOUS, hidden=(32,), log_std_init=-3.0)
    experience = budget_experience(QuantSpec(bits=8, max_kl=None), learner)
    pushed = experience.push(learner.behaviour_network)
    assert (pushed.rung, pushed.budget_kl, experience.actor_policy.network.rungs[1:]) == (0, None, ())
    from actorq.algos.base import Exploration
    from actorq.algos.td3 import TD3

    budgeted = QuantSpec(bits=8)  # quant.max_kl's default budget, falling back to fp32
    stochastic = actor_policy(learner, budgeted, torch.randn(8, CONTINUOUS.obs_dim)).network
    assert [spec.describe() for spec in stochastic.rungs[1:]] == ["fp32"]
    td3 = TD3(CONTINUOUS, Exploration(0.5), actor_hidden=(32,), critic_hidden=(32,))
    deterministic = actor_policy(td3, budgeted, torch.randn(8, CONTINUOUS.obs_dim)).network
    assert deterministic.rungs[1:] == ()  # a deterministic actor has no KL to bound


def test_a_fallback_version_is_one_whole_version_and_a_later_push_returns_to_int8():
    torch.manual_seed(0)
    policy = GaussianPolicy(CONTINUOUS, (32, 32), log_std_init=-1.0)
    int8 = QuantSpec(bits=8)
    network = QuantizedNetwork.template_for(policy, int8, int8.fallbacks())
    fp32 = QuantSpec(bits=32)
    from actorq.quant import quantize
    network.load_version(quantize(policy, fp32), policy.head.state_dict(), policy_version=3, rung=1)
    observations = torch.randn(4, 5)
    assert torch.equal(network(observations), policy(observations))
    assert int(network.built().policy_version) == 3 and network.payload()["l0_weight"].dtype == torch.float32
    assert "l1_weight_scale" in network.idle_buffers() and "fallback1_l1_weight" not in network.idle_buffers()
    network.load_version(quantize(policy, int8), policy_version=4)
    assert network.active_quant == int8 and network.payload()["l1_weight"].dtype == torch.int8
    # what a copying push (Ray's) leaves out: the precision the version is not at
    assert ("fallback1_l1_weight",) in idle_keys(network) and ("l1_weight",) not in idle_keys(network)
    assert not torch.equal(network(observations), policy(observations))
    with pytest.raises(ConfigError, match="precision 2 of a network with 2"):
        network.load_version(quantize(policy, fp32), rung=2)


def test_the_check_tells_apart_two_batches_of_one_worker_in_a_gathered_round():
    """A worker's two batches in one gathered round ran one at a time: recomputed together
    (one batch of two rows) a dynamic copy's log-probs would differ."""
    torch.manual_seed(0)
    learner = PPO(CONTINUOUS, hidden=(32, 32), log_std_init=-2.0)
    policy = actor_policy(learner, QuantSpec(bits=8, mode="dynamic"), torch.randn(8, CONTINUOUS.obs_dim))
    experience = rollout_experience()
    experience.actor_policy = policy
    observations = torch.randn(2, 3, CONTINUOUS.obs_dim) * torch.tensor([0.1, 30.0]).reshape(2, 1, 1)
    actions, log_probs = torch.empty(2, 3, 2), torch.empty(2, 3)
    for row in range(2):
        for t in range(3):  # each batch's one env, one step at a time
            action, log_prob = policy.network.sample_with_log_prob(observations[row, t].unsqueeze(0))
            actions[row, t], log_probs[row, t] = action[0], log_prob[0]
    fields = {"observation": observations, "action": actions, "log_prob": log_probs,
              "worker": torch.zeros(2, 3, dtype=torch.int64), "policy_version": torch.zeros(2, 3, dtype=torch.int64),
              "next": {"done": torch.zeros(2, 3, 1, dtype=torch.bool), "reward": torch.zeros(2, 3, 1)}}
    experience.receive(TensorDict({**fields, "segment": torch.tensor([[0] * 3, [1] * 3])}, batch_size=[2, 3]))
    assert experience.log_prob_error < 1e-5
    experience.receive(TensorDict(fields, batch_size=[2, 3]))  # without segments: one batch of two
    assert experience.log_prob_error > 1e-3


@pytest.mark.parametrize(("overrides", "budget"), [
    (("algo=ppo", "env=pendulum"), 0.01),  # on-policy: quant.max_kl=auto is 0.01
    (("algo=sac", "env=pendulum"), None),  # off-policy: none
    (("algo=sac", "env=pendulum", "quant.max_kl=0.02"), 0.02),  # a budget named is kept
    (("algo=ppo", "env=pendulum", "quant.max_kl=null"), None),
])
def test_the_default_budget_bounds_on_policy_learners_only(make_cfg, overrides, budget):
    from actorq.envs import make_env
    from actorq.run.build import build, build_learner
    from actorq.run.plan import make_plan

    cfg = make_cfg(*overrides, "quant.bits=8")
    learner = build_learner(cfg.algo, EnvSpec.from_env(make_env(cfg.env.name)), cfg.env.name)
    plan = make_plan(cfg, learner)
    quant = build(cfg.quant, **plan.quant)
    assert (plan.max_kl, quant.max_kl) == (budget, budget)
    rungs = actor_policy(learner, quant, torch.randn(8, learner.spec.obs_dim)).network.rungs
    assert len(rungs) == (1 if budget is None else 2)  # with a budget the copy can fall back to fp32
