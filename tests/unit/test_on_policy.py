"""The on-policy family's math and records: GAE on hand-computed trajectories, truncated
importance weights, the log-probabilities the actors record, and the lag the learner reads."""

import math
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

from actorq.actors.policy import ExplorationPolicy, actor_policy
from actorq.actors.base import gather_rounds, merge_rows
from actorq.actors.pool import set_worker_index
from actorq.algos.base import Exploration
from actorq.envs import EnvSpec
from actorq.algos.on_policy import OnPolicyLearner, gae, rollout_fields, truncated_importance_weights, vtrace
from actorq.algos.networks import CategoricalPolicy
from actorq.quant import QuantSpec
from tests.helpers import DISCRETE

FALSE = torch.zeros(1, 4, dtype=torch.bool)


def test_gae_is_the_papers_recursion_bootstrapped_at_the_rollouts_end():
    """gamma=0.9, lambda=0.8, rewards 1, 2, 3, 4; V(s_t) = 0.5 t; V(s'_t) = 0.5 (t + 1)."""
    reward = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    value, next_value = torch.tensor([[0.0, 0.5, 1.0, 1.5]]), torch.tensor([[0.5, 1.0, 1.5, 2.0]])
    delta = [1 + 0.9 * 0.5 - 0.0, 2 + 0.9 * 1.0 - 0.5, 3 + 0.9 * 1.5 - 1.0, 4 + 0.9 * 2.0 - 1.5]
    expected = [0.0] * 4
    running = 0.0
    for t in (3, 2, 1, 0):
        running = delta[t] + 0.9 * 0.8 * running
        expected[t] = running
    advantage = gae(reward, value, next_value, FALSE, FALSE, gamma=0.9, lam=0.8)
    assert advantage[0].tolist() == pytest.approx(expected)


def test_gae_cuts_at_episode_ends_and_bootstraps_a_truncated_one_but_not_a_terminated_one():
    """Step 1 ends its episode: terminated, its advantage is r - V(s); truncated (a time limit),
    r + gamma V(s'_1) - V(s). Step 0 carries step 1's on; nothing after step 1 reaches either."""
    reward, value = torch.ones(1, 4), torch.full((1, 4), 2.0)
    next_value = torch.full((1, 4), 3.0)
    done = torch.tensor([[False, True, False, False]])
    terminated = gae(reward, value, next_value, terminated=done, done=done, gamma=0.5, lam=1.0)
    truncated = gae(reward, value, next_value, terminated=FALSE, done=done, gamma=0.5, lam=1.0)
    assert terminated[0, 1].item() == pytest.approx(1 - 2.0)
    assert truncated[0, 1].item() == pytest.approx(1 + 0.5 * 3.0 - 2.0)
    assert terminated[0, 0].item() == pytest.approx((1 + 0.5 * 3.0 - 2.0) + 0.5 * (1 - 2.0))
    assert truncated[0, 0].item() == pytest.approx((1 + 0.5 * 3.0 - 2.0) + 0.5 * (1 + 0.5 * 3.0 - 2.0))
    later = reward.clone()
    later[0, 2:] = 100.0
    assert gae(later, value, next_value, done, done, 0.5, 1.0)[0, :2].tolist() == terminated[0, :2].tolist()


def test_importance_weights_are_the_ratio_truncated_at_clip_and_carry_no_gradient():
    log_pi = torch.log(torch.tensor([0.5, 0.2, 0.3])).requires_grad_()
    log_mu = torch.log(torch.tensor([0.25, 0.4, 0.3]))
    weights = truncated_importance_weights(log_pi, log_mu, clip=1.5)
    assert weights.tolist() == pytest.approx([1.5, 0.5, 1.0])
    assert not weights.requires_grad
    assert truncated_importance_weights(log_pi, log_mu).max().item() == pytest.approx(1.0)


@pytest.mark.parametrize("quant", [QuantSpec(bits=32), QuantSpec(bits=8, mode="static")], ids=["fp32", "int8"])
def test_actors_record_the_log_probability_of_their_own_policy(quant):
    """fp32 actors record exactly the learner's log pi (so every weight of a lock-step rollout
    is 1); int8 actors record their own, which differs from the learner's."""
    learner = A2CLike(DISCRETE)
    observations = torch.randn(256, 4)
    actors = actor_policy(learner, quant, observations)
    payload = {name: tensor.clone() for name, tensor in actors.network.payload().items()}
    actors.network.load_version(payload, policy_version=7)  # as a push numbers the version
    torch.manual_seed(0)
    action, log_mu, version, worker = actors(observations)
    log_pi = learner.policy.log_prob(observations, action)
    assert version.tolist() == [7] * 256 and action.shape == log_mu.shape == (256,)
    assert worker.tolist() == [-1] * 256  # the learner's process is no actor worker
    set_worker_index(3)  # as in actor worker 3, where a copy of this policy arrives pickled
    try:
        assert actors(observations[:2])[3].tolist() == [3, 3]
    finally:
        set_worker_index(None)
    if quant.bits == 32:
        assert torch.equal(log_mu, log_pi)
        assert torch.equal(truncated_importance_weights(log_pi, log_mu), torch.ones(256))
    else:
        assert 0 < (log_mu - log_pi).abs().max() < 0.1


def test_an_unbatched_observation_records_unbatched_values_and_unknown_records_are_refused():
    policy = ExplorationPolicy(CategoricalPolicy(DISCRETE, (8,)), DISCRETE, 0.0, stochastic=True,
                               records=("policy_version", "log_prob"))
    action, version, log_prob = policy(torch.zeros(4))
    assert action.shape == version.shape == log_prob.shape == ()
    assert math.isclose(log_prob.item(), math.log(0.5), abs_tol=0.5)
    with pytest.raises(ValueError, match=r"actors cannot record \['value'\]"):
        ExplorationPolicy(CategoricalPolicy(DISCRETE, (8,)), DISCRETE, 0.0, stochastic=True, records=("value",))
    with pytest.raises(ValueError, match="recording log_prob needs a stochastic policy"):
        ExplorationPolicy(CategoricalPolicy(DISCRETE, (8,)), DISCRETE, 0.0, records=("log_prob",))


class A2CLike(OnPolicyLearner):
    """The smallest on-policy learner: a categorical policy, no update of its own."""

    action_space = "discrete"

    def __init__(self, spec, **kwargs):
        super().__init__(spec, **kwargs)
        self.policy = CategoricalPolicy(spec, (32, 32))  # int8 runs the middle layer (fp32 ends)
        self.seen = []

    @property
    def behaviour_network(self):
        return self.policy

    def make_optimizers(self):
        return []

    def update_rollout(self, rollout):
        self.seen.append(rollout)
        return {}


class Pushed:
    policy_version, frames_per_batch, total_frames = 5, 64, 640


def rollout(envs: tuple[int, ...], steps: int, version: int) -> TensorDict:
    shape = (*envs, steps)
    return TensorDict({"observation": torch.zeros(*shape, 4), "action": torch.zeros(shape, dtype=torch.long),
                       "log_prob": torch.zeros(shape), "policy_version": torch.full(shape, version),
                       "next": {"observation": torch.zeros(*shape, 4), "reward": torch.ones(*shape, 1),
                                "terminated": torch.zeros(*shape, 1, dtype=torch.bool),
                                "done": torch.zeros(*shape, 1, dtype=torch.bool)}}, batch_size=shape)


def test_the_learner_sees_envs_by_steps_and_logs_how_many_versions_behind_the_actors_were():
    learner = A2CLike(DISCRETE, exploration=Exploration(0.0))
    learner.learn_from(Pushed())
    learner.learn(rollout((), 16, version=5), new_frames=16)  # one env: [T] -> [1, T]
    assert learner.seen[-1].shape == (1, 16) and learner.policy_lag == 0
    mixed = rollout((3,), 16, version=5)
    mixed["policy_version"][1, :4] = 3  # an env whose first steps ran an older version (asynchronous)
    learner.asynchronous = True
    learner.learn(mixed, new_frames=48)
    assert learner.seen[-1].shape == (3, 16) and learner.log_values()["collect/policy_lag"] == 2.0
    fields = rollout_fields(learner.seen[-1])
    assert fields["reward"].shape == fields["done"].shape == fields["log_prob"].shape == (3, 16)
    assert learner.planned_updates(640) == 10  # one update per batch of 64 frames
    learner.updates_per_rollout = 3
    assert learner.planned_updates(640) == 30
    learner.experience = None  # before a run: the whole budget is one batch
    assert learner.planned_updates(640) == 3


def test_the_lag_in_updates_counts_from_the_learner_step_each_version_was_pushed_at():
    """Version 0 at step 0; 40 updates, push 1; 40 more, push 2: a rollout still of version 0
    lags 40 updates, one that began with version 1 lags 40 when version 2 is out."""
    learner, experience = A2CLike(DISCRETE), SimpleNamespace(policy_version=0, frames_per_batch=16, total_frames=640)
    learner.learn_from(experience)
    learner.asynchronous = True
    learner.learn(rollout((2,), 8, version=0), new_frames=16)
    assert (learner.policy_lag, learner.policy_lag_steps) == (0, 0)
    learner.learner_steps, experience.policy_version = 40, 1
    learner.learn(rollout((2,), 8, version=0), new_frames=16)
    assert (learner.policy_lag, learner.policy_lag_steps) == (1, 40)
    learner.learner_steps, experience.policy_version = 80, 2
    mixed = rollout((2,), 8, version=2)
    mixed["policy_version"][0, :3] = 1
    learner.learn(mixed, new_frames=16)
    assert (learner.policy_lag, learner.policy_lag_steps) == (1, 40)
    assert learner.log_values() == {"collect/policy_lag": 1.0, "collect/policy_lag_steps": 40.0}


def test_a_lock_step_rollout_of_a_policy_the_learner_left_behind_is_refused():
    """In lock-step the learner's policy must be the one the round ran: updates with no push
    after them (a push every N > 1 rollouts) make the next round lag, which stops the run."""
    learner, experience = A2CLike(DISCRETE), SimpleNamespace(policy_version=3, frames_per_batch=16, total_frames=640)
    learner.learn_from(experience)
    learner.learn(rollout((2,), 8, version=3), new_frames=16)  # pushed at step 0
    learner.learner_steps, experience.policy_version = 4, 4  # updates, then a push: no lag
    learner.learn(rollout((2,), 8, version=4), new_frames=16)
    learner.learner_steps = 8  # updates, and no push after them
    with pytest.raises(RuntimeError, match="version 4, 0 versions and 4 updates behind its own"):
        learner.learn(rollout((2,), 8, version=4), new_frames=16)


def test_a_round_of_workers_is_one_batch_of_all_their_envs():
    one_env, three_envs = rollout((), 5, 0), rollout((3,), 5, 0)
    assert merge_rows([one_env]).shape == (1, 5)
    assert merge_rows([three_envs, one_env]).shape == (4, 5)


def test_gathered_rounds_merge_batches_as_they_arrive_and_number_a_workers_batches():
    def batch(worker: int, envs: int = 1) -> TensorDict:
        return TensorDict({"worker": torch.full((envs, 2), worker)}, batch_size=[envs, 2])

    arrivals = [batch(0), batch(2, envs=2), batch(0), batch(1), batch(0), batch(1), batch(2, envs=2)]
    rounds = list(gather_rounds(iter(arrivals), 3))
    rows = [list(zip(r["worker"][:, 0].tolist(), r["segment"][:, 0].tolist(), strict=True)) for r in rounds]
    # worker 2's two envs are two rows; worker 0's second batch in a round is its segment 1
    assert rows == [[(0, 0), (2, 0), (2, 0), (0, 1)], [(1, 0), (0, 0), (1, 1)], [(2, 0), (2, 0)]]
    assert all(r["segment"].shape == r.shape for r in rounds)


@pytest.mark.parametrize(("setting", "message"), [
    ({"trainer": {"devices": 2}}, r"one learner rank only \(trainer.devices=1\)"),
    ({"trainer": {"precision": "auto"}}, r"trainer.precision=auto times one update on a minibatch \(update_minibatch\)"),
])
def test_an_on_policy_run_refuses_what_it_cannot_do_in_one_line(setting, message):
    from omegaconf import OmegaConf

    from actorq.run.plan import plan_collection
    from actorq.util.errors import ConfigError

    cfg = OmegaConf.merge({"actors": {"collection": "auto", "init_random_frames": 0},
                           "trainer": {"devices": 1, "precision": "32-true"}}, setting)
    with pytest.raises(ConfigError, match=message):
        plan_collection(cfg, A2CLike(DISCRETE))
    fine = OmegaConf.create({"actors": {"collection": "auto", "init_random_frames": 0},
                             "trainer": {"devices": 1, "precision": "32-true"}})
    assert plan_collection(fine, A2CLike(DISCRETE)) == ("lockstep", 1)
    assert fine.actors.collection == "auto"  # the plan holds the choice; the config is not written back


def cadence_config(**changes):
    """What :func:`actorq.run.plan.plan_cadence` reads of a run config left at its defaults."""
    from omegaconf import OmegaConf

    return OmegaConf.merge({"actors": {"init_random_frames": None},
                            "callbacks": {"push": {"every_n_steps": None, "warmup_steps": 0}}}, changes)


def test_each_family_gets_its_own_push_cadence_and_random_frames_where_the_run_leaves_them_null():
    from actorq.algos.dqn import DQN
    from actorq.run.plan import plan_cadence

    for learner, cadence, random_frames in ((A2CLike(DISCRETE), 1, 0), (DQN(DISCRETE, Exploration(0.1), hidden=(8,)), 100, 1000)):
        assert plan_cadence(cadence_config(), learner) == (random_frames, cadence)
    cfg = cadence_config(actors={"init_random_frames": 50}, callbacks={"push": {"every_n_steps": 7}})
    assert plan_cadence(cfg, DQN(DISCRETE, Exploration(0.1), hidden=(8,))) == (50, 7)  # an off-policy run's own


@pytest.mark.parametrize(("changes", "message"), [
    ({"actors": {"init_random_frames": 100}}, "set actors.init_random_frames=0"),
    ({"callbacks": {"push": {"every_n_steps": 100}}}, r"leave callbacks.push.every_n_steps at 1 \(got 100;"),
    ({"callbacks": {"push": {"warmup_steps": 5}}}, r"leave callbacks.push.warmup_steps at 0 \(got 5;"),
    ({"callbacks": {"push": None}}, "it needs callbacks.push to push it after every rollout"),
])
def test_an_on_policy_run_refuses_a_cadence_that_has_its_actors_run_another_policy(changes, message):
    from actorq.run.plan import plan_cadence
    from actorq.util.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        plan_cadence(cadence_config(**changes), A2CLike(DISCRETE))
    fine = cadence_config(actors={"init_random_frames": 0}, callbacks={"push": {"every_n_steps": 1}})
    assert plan_cadence(fine, A2CLike(DISCRETE)) == (0, 1)


def test_vtrace_with_the_behaviour_policy_as_target_is_gae():
    """pi == mu: every rho is 1 and c is lam, so the targets are V + GAE(lam), episode ends included."""
    torch.manual_seed(0)
    shape = (3, 12)
    reward, value, next_value = torch.randn(shape), torch.randn(shape), torch.randn(shape)
    terminated = torch.zeros(shape, dtype=torch.bool)
    terminated[0, 4] = True
    done = terminated.clone()
    done[1, 7] = True  # truncated: bootstraps from V(s')
    targets, _ = vtrace(torch.zeros(shape), reward, value, next_value, terminated, done, gamma=0.9, lam=0.8)
    advantage = gae(reward, value, next_value, terminated, done, gamma=0.9, lam=0.8)
    assert torch.allclose(targets, value + advantage, atol=1e-6)


def test_vtrace_truncates_the_ratios_and_cuts_at_episode_ends_by_hand():
    """Three steps, ratios pi/mu of 2, 0.5 and 1, the second a truncated episode end; gamma 0.5,
    lam 1, rho_bar = c_bar = 1, every V(s) 0 except V(s'_1) = 4 and V(s'_2) = 2."""
    log_ratio = torch.log(torch.tensor([[2.0, 0.5, 1.0]]))
    reward = torch.tensor([[1.0, 2.0, 3.0]])
    value = torch.zeros(1, 3)
    next_value = torch.tensor([[0.0, 4.0, 2.0]])
    terminated = torch.zeros(1, 3, dtype=torch.bool)
    done = torch.tensor([[False, True, False]])
    targets, advantage = vtrace(log_ratio, reward, value, next_value, terminated, done, gamma=0.5)
    # rho = c = (1, 0.5, 1); delta = (1 * (1 + 0), 0.5 * (2 + 0.5 * 4), 1 * (3 + 0.5 * 2)) = (1, 2, 4)
    # v_2 = 4; v_1 = 2 (the episode ended: no trace from step 2); v_0 = 1 + 0.5 * 1 * 2 = 2
    assert targets.tolist() == [[pytest.approx(2.0), pytest.approx(2.0), pytest.approx(4.0)]]
    # A_0 = 1 + 0.5 * v_1 = 2; A_1 = 2 + 0.5 * V(s'_1) = 4 (episode end); A_2 = 3 + 0.5 * V(s'_2) = 4
    assert advantage.tolist() == [[pytest.approx(2.0), pytest.approx(4.0), pytest.approx(4.0)]]
    terminated_end = torch.tensor([[False, True, False]])
    _, advantage = vtrace(log_ratio, reward, value, next_value, terminated_end, done, gamma=0.5)
    assert advantage[0, 1].item() == pytest.approx(2.0)  # terminated: no bootstrap


def test_vtrace_cuts_the_traces_by_lambda_times_the_ratio_by_hand():
    """Two steps of one episode, ratios 0.5 and 1, gamma 0.5, lam 0.5, V(s) = (1, 2),
    V(s') = (2, 3), rewards 1: a trace below 1 carries lam * ratio of the next correction,
    and the advantages subtract V(s_t)."""
    log_ratio = torch.log(torch.tensor([[0.5, 1.0]]))
    reward, value, next_value = torch.ones(1, 2), torch.tensor([[1.0, 2.0]]), torch.tensor([[2.0, 3.0]])
    no = torch.zeros(1, 2, dtype=torch.bool)
    targets, advantage = vtrace(log_ratio, reward, value, next_value, no, no, gamma=0.5, lam=0.5)
    # rho = (0.5, 1), c = lam * rho = (0.25, 0.5); delta_1 = 1 + 0.5 * 3 - 2 = 0.5, so v_1 = 2.5;
    # delta_0 = 0.5 * (1 + 0.5 * 2 - 1) = 0.5, so v_0 = 1 + 0.5 + 0.5 * 0.25 * 0.5 = 1.5625
    assert targets.tolist() == [[pytest.approx(1.5625), pytest.approx(2.5)]]
    # A_0 = 1 + 0.5 * v_1 - V(s_0) = 1.25; A_1 = 1 + 0.5 * V(s'_1) - V(s_1) = 0.5
    assert advantage.tolist() == [[pytest.approx(1.25), pytest.approx(0.5)]]


# Two rows of four steps, for the hand-computed GAE and V-trace cases below: gamma 0.5,
# lambda 0.5, rewards (1, 2, 3, 4), V(s_t) = (1, 2, 1, 2), V(s'_t) = (2, 3, 5, 6). Row 0's
# episode is cut by a time limit at step 1 (done, not terminated): its V(s'_1) = 3 is neither
# the next episode's first value V(s_2) = 1 nor step 2's target. Row 1's episode terminates at
# step 1 and again at the rollout's last step.
REWARD = torch.tensor([[1.0, 2.0, 3.0, 4.0]] * 2)
VALUE = torch.tensor([[1.0, 2.0, 1.0, 2.0]] * 2)
NEXT_VALUE = torch.tensor([[2.0, 3.0, 5.0, 6.0]] * 2)
TERMINATED = torch.tensor([[False, False, False, False], [False, True, False, True]])
DONE = torch.tensor([[False, True, False, False], [False, True, False, True]])


def test_gae_by_hand_at_a_time_limit_a_termination_and_the_rollouts_end_with_lambda_below_one():
    advantage = gae(REWARD, VALUE, NEXT_VALUE, TERMINATED, DONE, gamma=0.5, lam=0.5)
    # delta_t = r + 0.5 (1 - terminated) V(s') - V(s); the trace gamma lam = 0.25, cut where done.
    # Row 0: delta = (1 + 1 - 1, 2 + 1.5 - 2, 3 + 2.5 - 1, 4 + 3 - 2) = (1, 1.5, 4.5, 5);
    #   A_3 = 5 (bootstrapped from V(s'_3)), A_2 = 4.5 + 0.25 * 5 = 5.75, A_1 = 1.5 (its own
    #   V(s'_1), nothing from step 2), A_0 = 1 + 0.25 * 1.5 = 1.375.
    # Row 1: delta = (1, 2 - 2, 4.5, 4 - 2) = (1, 0, 4.5, 2); A_3 = 2, A_2 = 4.5 + 0.25 * 2 = 5,
    #   A_1 = 0, A_0 = 1 + 0.25 * 0 = 1.
    assert advantage.tolist() == [pytest.approx([1.375, 1.5, 5.75, 5.0]), pytest.approx([1.0, 0.0, 5.0, 2.0])]


def test_vtrace_by_hand_with_ratios_above_between_and_below_distinct_caps():
    """Ratios pi/mu (4, 1, 0.25, 2) in both rows against rho_bar = 2 and c_bar = 0.5: 4 is above
    both caps, 1 and 2 between or at them, 0.25 below both; lambda 0.5 < 1."""
    log_ratio = torch.log(torch.tensor([[4.0, 1.0, 0.25, 2.0]] * 2))
    targets, advantage = vtrace(log_ratio, REWARD, VALUE, NEXT_VALUE, TERMINATED, DONE, gamma=0.5, lam=0.5,
                                rho_bar=2.0, c_bar=0.5)
    # rho = min(2, r) = (2, 1, 0.25, 2); c = 0.5 * min(0.5, r) = (0.25, 0.25, 0.125, 0.25).
    # Row 0: delta = rho (r + 0.5 V(s') - V(s)) = (2 * 1, 1 * 1.5, 0.25 * 4.5, 2 * 5) = (2, 1.5, 1.125, 10);
    #   v_3 - V = 10; v_2 - V = 1.125 + 0.5 * 0.125 * 10 = 1.75; v_1 - V = 1.5 (done: no trace);
    #   v_0 - V = 2 + 0.5 * 0.25 * 1.5 = 2.1875. Targets (3.1875, 3.5, 2.75, 12).
    #   A_t = r + 0.5 v'_t - V(s), v'_t = v_{t+1}, or V(s'_t) where done or at the end:
    #   A_0 = 1 + 0.5 * 3.5 - 1 = 1.75; A_1 = 2 + 0.5 * 3 - 2 = 1.5 (V(s'_1), not v_2 = 2.75 nor
    #   V(s_2) = 1); A_2 = 3 + 0.5 * 12 - 1 = 8; A_3 = 4 + 0.5 * 6 - 2 = 5.
    # Row 1: delta = (2, 1 * (2 - 2), 1.125, 2 * (4 - 2)) = (2, 0, 1.125, 4); v_3 - V = 4;
    #   v_2 - V = 1.125 + 0.5 * 0.125 * 4 = 1.375; v_1 - V = 0; v_0 - V = 2 + 0 = 2.
    #   Targets (3, 2, 2.375, 6); A = (1 + 0.5 * 2 - 1, 2 - 2, 3 + 0.5 * 6 - 1, 4 - 2) = (1, 0, 5, 2).
    assert targets.tolist() == [pytest.approx([3.1875, 3.5, 2.75, 12.0]), pytest.approx([3.0, 2.0, 2.375, 6.0])]
    assert advantage.tolist() == [pytest.approx([1.75, 1.5, 8.0, 5.0]), pytest.approx([1.0, 0.0, 5.0, 2.0])]


def test_a_rollout_of_one_step_is_a_td_error_for_gae_and_vtrace():
    """T = 1 (frames_per_batch equal to the number of envs): A = r + gamma V(s') - V(s) =
    1 + 0.5 * 4 - 1 = 2; V-trace with ratio 2 truncated to rho = 1: v = V + 2 = 3, A = 2."""
    one = torch.ones(1, 1)
    no = torch.zeros(1, 1, dtype=torch.bool)
    assert gae(one, one, 4 * one, no, no, gamma=0.5, lam=0.5).tolist() == [[2.0]]
    targets, advantage = vtrace(torch.log(2 * one), one, one, 4 * one, no, no, gamma=0.5, lam=0.5)
    assert targets.tolist() == [[3.0]] and advantage.tolist() == [[2.0]]


def test_auto_collection_overlaps_acting_and_learning_on_frames_and_keeps_lock_step_on_vectors():
    from omegaconf import OmegaConf

    from actorq.run.plan import plan_collection

    frames = EnvSpec(obs_dim=4 * 84 * 84, discrete=True, num_actions=4, frame_shape=(4, 84, 84))
    for spec, expected in ((DISCRETE, "lockstep"), (frames, "async")):
        cfg = OmegaConf.create({"actors": {"collection": "auto", "init_random_frames": 0, "num_workers": 1},
                                "trainer": {"devices": 1, "precision": "32-true"}})
        learner = A2CLike(spec)
        collection, _ = plan_collection(cfg, learner)
        assert (collection, learner.asynchronous) == (expected, expected == "async")


def test_the_learner_takes_the_cores_its_actors_leave_while_they_collect():

    from actorq.run.plan import learner_threads

    def threads(environ=None, collection="async", **actors):
        return learner_threads({"backend": "process", "num_workers": 1, **actors}, collection,
                               cores=4, environ=environ or {})

    assert threads(collection="lockstep") == 4  # the actors wait while it learns
    assert threads(collection="async", num_workers=2) == 2
    assert threads(collection="async", num_workers=6) == 1
    assert threads(collection="async", backend="ray") is None  # the actors run on Ray's cores
    assert threads(collection="async", environ={"OMP_NUM_THREADS": "1"}) is None  # the user's setting stands
