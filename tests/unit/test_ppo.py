"""PPO's learning math: the decoupled objective's weights and ratios against what the actors
recorded (fp32 and int8 actors), the Gaussian policy, the running statistics, and the
update's bookkeeping. The hand-computed GAE cases are in test_on_policy.py."""

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from actorq.actors.policy import actor_policy
from actorq.algos.networks import GaussianHead, GaussianPolicy, ObservationNormalizer
from actorq.algos.on_policy import RewardScaler, behaviour_correction, rollout_fields, rows_by_worker, vtrace
from actorq.algos.ppo import PPO, orthogonal_
from actorq.envs import EnvSpec
from actorq.quant import QuantizedNetwork, QuantSpec
from tests.helpers import CONTINUOUS, DISCRETE, attach_trainer

ENVS, STEPS = 4, 32


def collect(learner: PPO, quant: QuantSpec, seed: int = 0) -> TensorDict:
    """A rollout ``[envs, T]`` as lock-step actors record it: each step's actions sampled by
    the actors' copy of the learner's policy (encoded at ``quant``) at a batch of ``ENVS``
    observations, with their log-probability under that copy."""
    torch.manual_seed(seed)
    observations = torch.randn(ENVS, STEPS + 1, learner.spec.obs_dim) * 2
    actors = actor_policy(learner, quant, observations.reshape(-1, learner.spec.obs_dim))
    actions, log_mu = zip(*(actors(observations[:, t])[:2] for t in range(STEPS)))
    shape = (ENVS, STEPS)
    return TensorDict({
        "observation": observations[:, :-1], "action": torch.stack(actions, 1), "log_prob": torch.stack(log_mu, 1),
        "policy_version": torch.zeros(shape, dtype=torch.int64),
        "next": {"observation": observations[:, 1:], "reward": torch.randn(*shape, 1),
                 "terminated": torch.zeros(*shape, 1, dtype=torch.bool), "done": torch.zeros(*shape, 1, dtype=torch.bool)},
    }, batch_size=shape)


def trained_once(spec, quant: QuantSpec, **ppo_args) -> tuple[PPO, dict, list[dict]]:
    """A PPO learner's update of one collected rollout, with what each minibatch's loss saw."""
    torch.manual_seed(1)
    learner = PPO(spec, hidden=(32, 32), epochs=2, minibatch_size=32, **ppo_args)
    attach_trainer(learner, frames_per_batch=ENVS * STEPS, policy_version=0)
    seen = []
    loss = learner._loss

    def watched(batch, clip):
        out = loss(batch, clip)
        seen.append({"weight": batch["weight"].clone(), "ratio": out[2].clone(), "prox": batch["prox_log_prob"].clone(),
                     "terms": {name: float(value) for name, value in out[1].items()}})
        return out

    learner._loss = watched
    terms = learner.learn(collect(learner, quant), new_frames=ENVS * STEPS)
    return learner, terms, seen


@pytest.mark.parametrize("spec", [DISCRETE, CONTINUOUS], ids=["categorical", "gaussian"])
def test_with_fp32_actors_in_lock_step_the_first_minibatch_is_plain_ppo(spec):
    """mu == pi_prox == pi at the first minibatch: every weight and every ratio is 1 (to
    float rounding: the actors ran the same fp32 policy at a batch of 4 rows, the learner at
    128), nothing is truncated, the KL estimate is 0; later minibatches move pi away."""
    learner, terms, seen = trained_once(spec, QuantSpec(bits=32))
    first = seen[0]
    assert torch.allclose(first["ratio"], torch.ones_like(first["ratio"]), atol=1e-5)
    assert torch.allclose(first["weight"], torch.ones_like(first["weight"]), atol=1e-5)
    assert float(terms["truncated_fraction"]) == 0.0
    assert abs(float(terms["kl_behaviour"])) < 1e-6
    assert float(terms["importance_weight_mean"]) == pytest.approx(1.0, abs=1e-6)
    assert not torch.allclose(seen[-1]["ratio"], torch.ones_like(seen[-1]["ratio"]), atol=1e-5)
    assert learner.learner_steps == len(seen) == 2 * 4  # 2 epochs x 128 steps / 32


@pytest.mark.parametrize("spec", [DISCRETE, CONTINUOUS], ids=["categorical", "gaussian"])
def test_with_int8_actors_the_weights_are_the_truncated_ratio_of_prox_to_what_they_recorded(spec):
    torch.manual_seed(1)
    learner = PPO(spec, hidden=(32, 32), importance_weight_cap=1.2, orthogonal_init=False)
    rollout = collect(learner, QuantSpec(bits=8, mode="dynamic"))
    steps, terms = learner.prepare(rollout)
    with torch.no_grad():
        prox = learner.policy.log_prob(rollout["observation"], rollout["action"]).reshape(-1)
    log_ratio = (prox - rollout["log_prob"].reshape(-1)).double()
    ratio = log_ratio.exp()
    assert torch.allclose(steps["prox_log_prob"], prox, atol=1e-6)
    assert torch.allclose(steps["weight"].double(), ratio.clamp(max=1.2), atol=1e-6)
    assert not torch.allclose(steps["weight"], torch.ones_like(steps["weight"]), atol=1e-4)  # int8 is not fp32
    assert float(terms["truncated_fraction"]) == pytest.approx(float((ratio > 1.2 * (1 + 1e-5)).float().mean()))
    assert float(terms["kl_behaviour"]) == pytest.approx(float(((ratio - 1) - log_ratio).mean()), rel=1e-3)
    assert float(terms["kl_behaviour"]) > 0
    assert float(terms["importance_weight_max"]) <= 1.2


def test_the_correction_terms_on_a_hand_computed_batch():
    """ratios pi_prox / mu of 2, 1 and 0.5: weights min(r, 1); KL estimate mean((r - 1) - log r)."""
    mu = torch.log(torch.tensor([0.25, 0.5, 0.5]))
    prox = torch.log(torch.tensor([0.5, 0.5, 0.25]))
    terms = behaviour_correction(prox, mu)
    assert terms["weight"].tolist() == pytest.approx([1.0, 1.0, 0.5])
    expected_kl = ((1 - math.log(2)) + 0 + (-0.5 + math.log(2))) / 3
    assert float(terms["kl_behaviour"]) == pytest.approx(expected_kl)
    assert float(terms["importance_weight_mean"]) == pytest.approx(2.5 / 3)
    assert float(terms["importance_weight_max"]) == 1.0 and float(terms["truncated_fraction"]) == pytest.approx(1 / 3)
    assert behaviour_correction(prox, mu, cap=3.0)["weight"].tolist() == pytest.approx([2.0, 1.0, 0.5])


def test_the_truncated_fraction_counts_ratios_above_the_cap_beyond_float_rounding():
    """Ratios against C = 1.5: 1.5 (1 + 5e-6) is the cap to float rounding, not truncated;
    1.5 (1 + 1e-4) and 4 are; 0.25 keeps its weight. The largest weight is C."""
    ratio = torch.tensor([1.5 * (1 + 5e-6), 1.5 * (1 + 1e-4), 4.0, 0.25], dtype=torch.float64)
    terms = behaviour_correction(ratio.log(), torch.zeros(4, dtype=torch.float64), cap=1.5)
    assert terms["weight"].tolist() == pytest.approx([1.5, 1.5, 1.5, 0.25])
    assert float(terms["truncated_fraction"]) == 0.5
    assert float(terms["importance_weight_max"]) == 1.5
    assert float(terms["importance_weight_mean"]) == pytest.approx(4.75 / 4)


def test_a_ratio_exactly_at_the_truncation_threshold_is_not_truncated():
    """``C (1 + 1e-5)`` itself is float rounding of C (the threshold is strict); float64
    ratios, so the threshold is exactly representable."""
    threshold = torch.tensor([1.5 * (1 + 1e-5)], dtype=torch.float64)
    terms = behaviour_correction(threshold.log(), torch.zeros(1, dtype=torch.float64), cap=1.5)
    assert float(terms["truncated_fraction"]) == 0.0


def hand_set_ppo(**ppo_args) -> PPO:
    """PPO with gamma 0.5, lambda 0.5 and C = 1.5 whose networks are set by hand: the policy
    gives action 0 probability 0.2 and action 1 probability 0.8 in every state; the value of
    a state ``s`` with ``s_0 >= 0`` is ``s_0``."""
    learner = PPO(DISCRETE, hidden=(4,), gamma=0.5, gae_lambda=0.5, importance_weight_cap=1.5, **ppo_args)
    with torch.no_grad():
        for parameter in (*learner.policy.parameters(), *learner.value.parameters()):
            parameter.zero_()
        learner.policy.trunk[-1].bias.copy_(torch.tensor([0.0, math.log(4.0)]))  # softmax: (0.2, 0.8)
        learner.value[0].weight[0, 0] = learner.value[-1].weight[0, 0] = 1.0  # relu(s_0)
    return learner


def hand_made_rollout() -> TensorDict:
    """Two rows as actors record them: V(s_t) = (1, 2, 1, 5) and V(s'_t) = (2, 3, 5, 6) put in
    the observations (within an episode s'_t is s_{t+1}; s'_1 is an episode's final observation,
    s'_3 the rollout's last), rewards (1, 2, 3, 4), row 0 cut by a time limit at step 1, row 1
    terminated at steps 1 and 3; actions (0, 1, 0, 1) taken with mu = (0.05, 0.8, 0.8, 0.4),
    so pi_prox / mu = (4, 1, 0.25, 2)."""
    shape = (2, 4)
    observation, next_observation = torch.zeros(*shape, 4), torch.zeros(*shape, 4)
    observation[..., 0] = torch.tensor([1.0, 2.0, 1.0, 5.0])
    next_observation[..., 0] = torch.tensor([2.0, 3.0, 5.0, 6.0])
    terminated = torch.tensor([[False, False, False, False], [False, True, False, True]])
    done = torch.tensor([[False, True, False, False], [False, True, False, True]])
    return TensorDict({
        "observation": observation, "action": torch.tensor([[0, 1, 0, 1]] * 2),
        "log_prob": torch.log(torch.tensor([[0.05, 0.8, 0.8, 0.4]] * 2)),
        "policy_version": torch.zeros(shape, dtype=torch.int64),
        "next": {"observation": next_observation, "reward": torch.tensor([[1.0, 2.0, 3.0, 4.0]] * 2).unsqueeze(-1),
                 "terminated": terminated.unsqueeze(-1), "done": done.unsqueeze(-1)},
    }, batch_size=shape)


def test_prepare_by_hand_in_lock_step_gae_weights_and_the_correction_terms():
    learner = hand_set_ppo()
    steps, terms = learner.prepare(hand_made_rollout())
    assert steps["prox_log_prob"].exp().tolist() == pytest.approx([0.2, 0.8, 0.2, 0.8] * 2)
    # GAE(0.5): delta = r + 0.5 V' (not terminated) - V: rows (1, 1.5, 4.5, 2) and (1, 0, 4.5, -1);
    # A_t = delta_t + 0.25 (not done) A_{t+1}: rows (1.375, 1.5, 5, 2) and (1, 0, 4.25, -1); returns A + V.
    # The values at the episode ends (s'_1) and the rollout's end (s'_3) are not those of s_{t+1}.
    assert steps["advantage"].tolist() == pytest.approx([1.375, 1.5, 5.0, 2.0, 1.0, 0.0, 4.25, -1.0])
    assert steps["return"].tolist() == pytest.approx([2.375, 3.5, 6.0, 7.0, 2.0, 2.0, 5.25, 4.0])
    # w = min(pi_prox / mu, 1.5) = (1.5, 1, 0.25, 1.5): lagged actors, ratios above and below C.
    assert steps["weight"].tolist() == pytest.approx([1.5, 1.0, 0.25, 1.5] * 2)
    # KL estimate: mean of (r - 1) - log r = (3 - log 4) + 0 + (-0.75 + log 4) + (1 - log 2), over 4.
    assert float(terms["kl_behaviour"]) == pytest.approx((3.25 - math.log(2.0)) / 4, rel=1e-5)
    assert float(terms["truncated_fraction"]) == 0.5 and float(terms["importance_weight_max"]) == 1.5
    assert float(terms["importance_weight_mean"]) == pytest.approx(4.25 / 4)
    # The first minibatch (pi == pi_prox, every r = 1): L_policy = -mean(w A) = -(7.8125 + 1.0625) / 8;
    # L_value = mean((R - V)^2) = mean(A^2) = (33.140625 + 20.0625) / 8.
    learner.normalize_advantage = False
    _, loss_terms, _ = learner._loss(steps, clip=0.2)
    assert float(loss_terms["loss_policy"]) == pytest.approx(-8.875 / 8, rel=1e-5)
    assert float(loss_terms["loss_value"]) == pytest.approx(53.203125 / 8, rel=1e-5)


def test_prepare_by_hand_under_asynchronous_collection_takes_vtrace_with_caps_of_one():
    learner = hand_set_ppo()
    learner.asynchronous = True
    steps, _ = learner.prepare(hand_made_rollout())
    # rho = min(1, r) = (1, 1, 0.25, 1), c = 0.5 rho = (0.5, 0.5, 0.125, 0.5).
    # Row 0: delta = (1, 1.5, 0.25 * 4.5, 2); v - V: 2, 1.125 + 0.5 * 0.125 * 2 = 1.25, 1.5 (done),
    #   1 + 0.5 * 0.5 * 1.5 = 1.375; targets (2.375, 3.5, 2.25, 7);
    #   A = (1 + 0.5 * 3.5 - 1, 2 + 0.5 * 3 - 2, 3 + 0.5 * 7 - 1, 4 + 0.5 * 6 - 5) = (1.75, 1.5, 5.5, 2).
    # Row 1: delta = (1, 0, 1.125, -1); v - V: -1, 1.125 - 0.0625 = 1.0625, 0, 1; targets (2, 2, 2.0625, 4);
    #   A = (1 + 0.5 * 2 - 1, 0, 3 + 0.5 * 4 - 1, 4 - 5) = (1, 0, 4, -1).
    assert steps["return"].tolist() == pytest.approx([2.375, 3.5, 2.25, 7.0, 2.0, 2.0, 2.0625, 4.0])
    assert steps["advantage"].tolist() == pytest.approx([1.75, 1.5, 5.5, 2.0, 1.0, 0.0, 4.0, -1.0])
    assert steps["weight"].tolist() == pytest.approx([1.5, 1.0, 0.25, 1.5] * 2)  # C, not rho-bar


def surrogate_batch(learner: PPO, ratio: torch.Tensor, advantage: torch.Tensor, weight: torch.Tensor) -> dict:
    """A minibatch whose ratios pi / pi_prox are ``ratio`` (pi_prox set from the policy's own
    log-probabilities), with returns 1, 2, 3, ..."""
    observation = torch.linspace(-1, 1, 4 * len(ratio)).reshape(len(ratio), 4)
    action = torch.arange(len(ratio)) % 2
    with torch.no_grad():
        log_pi = learner.policy.log_prob(observation, action)
    return {"observation": observation, "action": action, "prox_log_prob": log_pi - ratio.log(),
            "advantage": advantage, "return": torch.arange(1.0, len(ratio) + 1), "weight": weight}


def test_the_clipped_surrogate_is_weighted_and_clipped_against_prox_not_against_mu():
    """L = -mean(w * min(r A, clip(r, 1-eps, 1+eps) A)) + c_v mean((R - V)^2) - c_e H for
    hand-picked r, A and w, each clip bound reached from the side where it binds."""
    learner = PPO(DISCRETE, hidden=(8,), normalize_advantage=False, value_coef=0.7, entropy_coef=0.1)
    ratio = torch.tensor([1.5, 0.5, 1.05, 0.5])
    batch = surrogate_batch(learner, ratio, torch.tensor([2.0, 3.0, -2.0, -4.0]), torch.tensor([1.0, 0.5, 0.8, 1.0]))
    loss, terms, seen_ratio = learner._loss(batch, clip=0.2)
    assert torch.allclose(seen_ratio, ratio, atol=1e-6)
    # The smaller of r A and clip(r) A: 1.5 * 2 -> 1.2 * 2 = 2.4 (upper bound, A > 0); 0.5 * 3 = 1.5
    # (unclipped, smaller); 1.05 * -2 = -2.1 (inside the bounds); 0.5 * -4 -> 0.8 * -4 = -3.2 (lower
    # bound, A < 0).
    expected_policy = -(1.0 * 2.4 + 0.5 * 1.5 + 0.8 * -2.1 + 1.0 * -3.2) / 4
    assert float(terms["loss_policy"]) == pytest.approx(expected_policy, abs=1e-5)
    with torch.no_grad():
        value = learner.value(batch["observation"]).squeeze(-1)
        entropy = learner.policy.head.entropy(learner.policy.trunk(batch["observation"])).mean()
    expected_value = float(((batch["return"] - value) ** 2).mean())
    assert float(terms["loss_value"]) == pytest.approx(expected_value, rel=1e-5)
    assert float(terms["entropy"]) == pytest.approx(float(entropy), rel=1e-5)
    assert float(loss.detach()) == pytest.approx(expected_policy + 0.7 * expected_value - 0.1 * float(entropy), rel=1e-5)


def test_advantages_are_normalized_per_minibatch_unless_it_has_one_step():
    """With ``normalize_advantage`` the surrogate sees (A - mean) / (std + 1e-8) (sample std);
    a minibatch of one step keeps its advantage (its std is undefined)."""
    learner = PPO(DISCRETE, hidden=(8,), normalize_advantage=True, value_coef=0.0)
    advantage, weight = torch.tensor([1.0, 5.0]), torch.tensor([1.0, 0.5])  # unequal weights: a mean that is not 0
    batch = surrogate_batch(learner, torch.ones(2), advantage, weight)
    _, terms, _ = learner._loss(batch, clip=0.2)
    normalized = (advantage - 3.0) / (math.sqrt(8.0) + 1e-8)  # std of (1, 5) with Bessel's correction
    assert float(terms["loss_policy"]) == pytest.approx(float(-(weight * normalized).mean()), abs=1e-6)
    batch = surrogate_batch(learner, torch.tensor([0.5]), torch.tensor([3.0]), torch.ones(1))
    _, terms, _ = learner._loss(batch, clip=0.2)
    assert float(terms["loss_policy"]) == pytest.approx(-0.5 * 3.0, abs=1e-6)


def test_the_gaussian_head_is_a_diagonal_normal_with_a_state_independent_log_std():
    head = GaussianHead(low=(-1.0, -1.0), high=(1.0, 2.0), log_std_init=-0.5)
    mean = torch.tensor([[0.3, -3.0], [2.0, 0.5]])
    action = torch.tensor([[0.1, 0.2], [1.5, 0.4]])
    normal = torch.distributions.Normal(mean, torch.full_like(mean, math.exp(-0.5)))
    assert torch.allclose(head.log_prob(mean, action), normal.log_prob(action).sum(-1))
    assert torch.allclose(head.entropy(mean), normal.entropy().sum(-1))
    assert torch.allclose(head(mean), torch.tensor([[0.3, -1.0], [1.0, 0.5]]))  # the deterministic action: clipped mean
    torch.manual_seed(0)
    means = mean.expand(20000, 2, 2).reshape(-1, 2)
    samples, log_prob = head.sample_with_log_prob(means)
    assert torch.allclose(log_prob, head.log_prob(means, samples), atol=1e-5)
    assert (samples - means).std(0).tolist() == pytest.approx([math.exp(-0.5)] * 2, rel=0.02)
    assert samples.max() > 2.0 and samples.min() < -1.0  # unclipped draws: the env clips them
    assert list(dict(head.named_parameters())) == ["log_std"]


def test_running_statistics_match_the_whole_datas_mean_and_variance():
    rng = np.random.default_rng(0)
    chunks = [rng.normal(3.0, 2.0, size=(n, 3)).astype(np.float32) for n in (1, 7, 100, 33)]
    normalizer = ObservationNormalizer(3, clip=100.0)
    for chunk in chunks:
        normalizer.update(torch.from_numpy(chunk))
    data = np.concatenate(chunks)
    assert normalizer.mean.numpy() == pytest.approx(data.mean(0), rel=1e-5)
    assert normalizer.var.numpy() == pytest.approx(data.var(0), rel=1e-4)
    assert float(normalizer.count) == len(data)
    z = normalizer(torch.from_numpy(data)).numpy()
    assert z.mean(0) == pytest.approx([0.0] * 3, abs=1e-4) and z.std(0) == pytest.approx([1.0] * 3, rel=1e-3)
    assert float(ObservationNormalizer(1, clip=5.0)(torch.tensor([[100.0]]))) == 5.0


def test_rewards_are_scaled_by_the_running_std_of_each_envs_discounted_return():
    scaler = RewardScaler(gamma=0.5)
    reward = torch.tensor([[1.0, 2.0, 3.0], [0.0, 4.0, 0.0]])
    done = torch.tensor([[False, True, False], [False, False, False]])
    scaled = scaler(reward, done)
    returns = [1.0, 2.5, 3.0, 0.0, 4.0, 2.0]  # env 0's return starts again after its episode ends
    assert float(scaler.mean) == pytest.approx(float(np.mean(returns)))
    assert float(scaler.var) == pytest.approx(float(np.var(returns)))
    assert torch.allclose(scaled, reward / math.sqrt(np.var(returns)), atol=1e-6)
    scaler(torch.tensor([[1.0], [1.0]]), torch.zeros(2, 1, dtype=torch.bool))
    assert float(scaler.count) == 8
    returns += [3.0 * 0.5 + 1.0, 2.0 * 0.5 + 1.0]  # each env's return goes on from where it stood
    assert float(scaler.var) == pytest.approx(float(np.var(returns)))
    clipped = RewardScaler(gamma=0.5, clip=1.0)  # returns 10 and -5: std 7.5, so +-1.33 clipped to +-1
    assert clipped(torch.tensor([[10.0, -10.0]]), torch.zeros(1, 2, dtype=torch.bool)).tolist() == [[1.0, -1.0]]


def test_asynchronous_batches_keep_one_running_return_per_worker_and_env():
    """gamma 0.5; worker 0's batch, worker 1's, worker 0's again (asynchronous hand-over):
    worker 0's rows go on from its own returns, not from worker 1's rows of the batch between.
    Worker 0 (2 envs): rewards (1, 1) and (2, 0): returns (1, 1.5) and (2, 1); then 1 and 1:
    1.5 * 0.5 + 1 = 1.75 and 1 * 0.5 + 1 = 1.5 (per row, they would go on from worker 1's 4
    and 8: 3 and 5). Worker 1 (2 envs): rewards (4, 4), its env 0 ending at step 0, and
    (0, 8): returns (4, 4) and (0, 8)."""
    scaler = RewardScaler(gamma=0.5)
    no = torch.zeros(2, 2, dtype=torch.bool)
    scaler(torch.tensor([[1.0, 1.0], [2.0, 0.0]]), no, worker=torch.tensor([0, 0]))
    scaler(torch.tensor([[4.0, 4.0], [0.0, 8.0]]), torch.tensor([[True, False], [False, False]]),
           worker=torch.tensor([1, 1]))
    scaler(torch.ones(2, 1), torch.zeros(2, 1, dtype=torch.bool), worker=torch.tensor([0, 0]))
    returns = [1.0, 1.5, 2.0, 1.0, 4.0, 4.0, 0.0, 8.0, 1.75, 1.5]
    assert float(scaler.count) == len(returns)
    assert float(scaler.mean) == pytest.approx(float(np.mean(returns)))
    assert float(scaler.var) == pytest.approx(float(np.var(returns)))


def test_a_lock_step_round_and_a_later_batch_of_one_worker_find_each_env_by_worker():
    """A round merges worker 0's env and worker 1's two (rows 0 | 1, 2), rewards 1, gamma 1;
    a batch of worker 1 alone (rows 0, 1) then goes on from rows 1 and 2 of the round (2 and
    3 after reward 1), not from row 0 and 1 (2 and 2); worker 0 with two envs now, not one, starts
    again at 0 (1 and 1)."""
    scaler = RewardScaler(gamma=1.0)
    scaler(torch.tensor([[1.0], [1.0], [2.0]]), torch.zeros(3, 1, dtype=torch.bool), worker=torch.tensor([0, 1, 1]))
    scaler(torch.ones(2, 1), torch.zeros(2, 1, dtype=torch.bool), worker=torch.tensor([1, 1]))
    scaler(torch.ones(2, 1), torch.zeros(2, 1, dtype=torch.bool), worker=torch.tensor([0, 0]))
    returns = [1.0, 1.0, 2.0, 2.0, 3.0, 1.0, 1.0]
    assert float(scaler.mean) == pytest.approx(float(np.mean(returns)))
    assert float(scaler.var) == pytest.approx(float(np.var(returns)))
    rows = rows_by_worker(torch.tensor([1, 0, 1, 1]))
    assert {worker: at.tolist() for worker, at in rows.items()} == {0: [1], 1: [0, 2, 3]}


def test_a_gathered_round_with_two_batches_of_one_worker_goes_on_from_the_first_in_the_second():
    """Rows: worker 0's first batch, worker 1's, worker 0's second (segment 1), rewards 1, gamma
    1, two steps each: worker 0's second batch goes on from its first (returns 3 and 4), as if
    the two had come one round after the other; then a batch of worker 0 goes on from that (5)."""
    gathered, in_turn = RewardScaler(gamma=1.0), RewardScaler(gamma=1.0)
    no = torch.zeros(3, 2, dtype=torch.bool)
    gathered(torch.ones(3, 2), no, worker=torch.tensor([0, 1, 0]), segment=torch.tensor([0, 0, 1]))
    in_turn(torch.ones(2, 2), no[:2], worker=torch.tensor([0, 1]))
    in_turn(torch.ones(1, 2), no[:1], worker=torch.tensor([0]))
    returns = [1.0, 2.0, 1.0, 2.0, 3.0, 4.0]
    for scaler in (gathered, in_turn):
        assert float(scaler.mean) == pytest.approx(float(np.mean(returns)))
        assert float(scaler.var) == pytest.approx(float(np.var(returns)))
    gathered(torch.ones(1, 1), no[:1, :1], worker=torch.tensor([0]))
    assert float(gathered.mean) == pytest.approx(float(np.mean(returns + [5.0])))


def test_a_gathered_rounds_segments_are_scaled_in_order_each_from_the_one_before():
    """Worker 0's two batches in a round, rewards 1 then 10 (gamma 1, two steps): the second
    goes on from the first (returns 1, 2, 12, 22), not the other way round (10, 20, 21, 22),
    and the next batch from the second's end (23); without a worker record the rows are one
    worker's envs, in order."""
    no = torch.zeros(2, 2, dtype=torch.bool)
    reward = torch.tensor([[1.0, 1.0], [10.0, 10.0]])
    for worker in (torch.tensor([0, 0]), None):
        scaler = RewardScaler(gamma=1.0)
        scaler(reward, no, worker=worker, segment=torch.tensor([0, 1]))
        returns = [1.0, 2.0, 12.0, 22.0]
        assert float(scaler.mean) == pytest.approx(float(np.mean(returns)))
        assert float(scaler.var) == pytest.approx(float(np.var(returns)))
        scaler(torch.ones(1, 1), no[:1, :1], worker=None if worker is None else worker[:1])
        assert float(scaler.mean) == pytest.approx(float(np.mean(returns + [23.0])))


def test_ppo_scales_a_gathered_round_by_the_segments_the_actors_recorded():
    """A round of two batches of one worker with two envs (rows 0, 1 | 2, 3): PPO's scaler ends
    where one fed the two batches in turn does, not where one fed four envs does."""
    learner = PPO(DISCRETE, hidden=(8,), scale_rewards=True, gamma=0.5)
    rollout = collect(learner, QuantSpec(bits=32))
    rollout["worker"] = torch.zeros(rollout.shape, dtype=torch.int64)
    rollout["segment"] = torch.tensor([0, 0, 1, 1]).unsqueeze(1).expand(rollout.shape)
    learner.prepare(rollout)
    fields = rollout_fields(rollout)
    assert rollout_fields(rollout[:, :1])["segment"].tolist() == [0, 0, 1, 1]  # a one-step round too
    in_turn, as_envs = RewardScaler(gamma=0.5), RewardScaler(gamma=0.5)
    for rows in (slice(0, 2), slice(2, 4)):
        in_turn(fields["reward"][rows], fields["done"][rows], fields["worker"][rows])
    as_envs(fields["reward"], fields["done"], fields["worker"])
    assert float(learner.reward_scaler.var) == pytest.approx(float(in_turn.var), rel=1e-9)
    assert float(in_turn.var) != pytest.approx(float(as_envs.var), rel=1e-6)


def test_an_update_moves_the_observation_normalizer_to_the_rollouts_statistics():
    """The next version's statistics: after an update the normalizer has taken in exactly the
    rollout's observations (its first, so its mean is theirs)."""
    learner = PPO(CONTINUOUS, hidden=(8,), normalize_observations=True, epochs=1, minibatch_size=64)
    attach_trainer(learner, frames_per_batch=ENVS * STEPS, policy_version=0)
    rollout = collect(learner, QuantSpec(bits=32))
    rollout["observation"] = rollout["observation"] * 3 + 5
    learner.learn(rollout, new_frames=ENVS * STEPS)
    observations = rollout["observation"].reshape(-1, CONTINUOUS.obs_dim)
    assert learner.policy.normalizer.mean.tolist() == pytest.approx(observations.mean(0).tolist(), rel=1e-5)


def test_a_gradient_step_clips_the_gradients_norm_to_max_grad_norm():
    """The gradient left after the step is the clipped one (zeroed before each backward)."""
    learner = PPO(DISCRETE, hidden=(8,), epochs=1, minibatch_size=ENVS * STEPS, max_grad_norm=0.01)
    attach_trainer(learner, frames_per_batch=ENVS * STEPS, policy_version=0)
    learner.learn(collect(learner, QuantSpec(bits=32)), new_frames=ENVS * STEPS)
    grads = [p.grad for group in learner.optimizers().optimizer.param_groups for p in group["params"]
             if p.grad is not None]
    assert float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))) == pytest.approx(0.01, rel=1e-4)


def test_a_gradient_step_clips_only_when_asked():
    learner = PPO(DISCRETE, hidden=(8,))
    attach_trainer(learner, frames_per_batch=ENVS * STEPS, policy_version=0)
    loss = 1e3 * learner.policy.log_prob(torch.randn(8, DISCRETE.obs_dim), torch.zeros(8, dtype=torch.long)).sum()
    learner.gradient_step(learner.optimizers(), loss)
    grads = [p.grad.norm() for p in learner.policy.parameters() if p.grad is not None]
    assert float(torch.linalg.vector_norm(torch.stack(grads))) > 10.0  # unclipped by default
    assert learner.learner_steps == 1


def test_the_reward_scalers_statistics_hold_what_float32_would_lose_and_a_zero_std_scales_by_eps():
    """A first rollout whose returns are all 1 (std 0) divides by sqrt(eps) = 1e-4 and clips
    at the default 10; returns 1e8 and 1e8 + 1 (equal in float32) have variance 0.25; the
    frame count goes on past 2^24 (where float32 stops counting by one)."""
    scaler = RewardScaler(gamma=1.0)
    assert scaler(torch.tensor([[1.0, 0.0]]), torch.zeros(1, 2, dtype=torch.bool)).tolist() == [[10.0, 0.0]]
    fine = RewardScaler(gamma=1.0)
    fine(torch.tensor([[1e8, 1.0]]), torch.zeros(1, 2, dtype=torch.bool))
    assert float(fine.var) == 0.25
    fine.count.fill_(2**24)
    fine(torch.ones(1, 1), torch.zeros(1, 1, dtype=torch.bool))
    assert float(fine.count) == 2**24 + 1


def test_ppo_scales_rewards_per_worker_from_what_the_actors_recorded():
    """The worker of each row reaches the scaler from the rollout's ``worker`` record: PPO's
    scaler ends where one fed the workers by hand does, not where one fed rows does."""
    learner = PPO(DISCRETE, hidden=(8,), scale_rewards=True, gamma=0.5)
    by_worker, by_row = RewardScaler(gamma=0.5), RewardScaler(gamma=0.5)
    for seed, worker in ((0, 0), (1, 1), (2, 0)):
        rollout = collect(learner, QuantSpec(bits=32), seed=seed)
        rollout["worker"] = torch.full(rollout.shape, worker)
        learner.prepare(rollout)
        fields = rollout_fields(rollout)
        by_worker(fields["reward"], fields["done"], fields["worker"])
        by_row(fields["reward"], fields["done"])
    assert float(learner.reward_scaler.var) == pytest.approx(float(by_worker.var), rel=1e-9)
    assert float(by_worker.var) != pytest.approx(float(by_row.var), rel=1e-6)
    learner.prepare(rollout[:, :1])  # a rollout of one step (frames_per_batch = envs) has its worker too
    assert float(learner.reward_scaler.count) == float(by_worker.count) + ENVS


@torch.no_grad()
def test_orthogonal_init_gives_hidden_layers_gain_sqrt2_and_the_output_its_own():
    learner = PPO(DISCRETE, hidden=(64, 64))
    output = learner.policy.trunk[-1].weight
    assert torch.linalg.svdvals(output).max() == pytest.approx(0.01, rel=1e-4)
    hidden = learner.policy.trunk[0].weight
    assert torch.linalg.svdvals(hidden).tolist() == pytest.approx([math.sqrt(2)] * 4, rel=1e-4)
    assert torch.linalg.svdvals(learner.value[-1].weight).max() == pytest.approx(1.0, rel=1e-4)
    assert all(float(layer.bias.abs().max()) == 0 for layer in learner.policy.trunk if hasattr(layer, "bias"))
    plain = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    orthogonal_(plain, output_gain=3.0)
    assert torch.linalg.svdvals(plain[2].weight).max() == pytest.approx(3.0, rel=1e-4)


def test_the_actors_copy_normalizes_with_the_policys_statistics_and_calibrates_on_normalized_inputs():
    policy = GaussianPolicy(CONTINUOUS, (32, 32), normalize_observations=True)
    observations = torch.randn(512, 3) * 50 + 100  # far outside int8's calibrated range unless normalized
    policy.normalizer.update(observations)
    for quant in (QuantSpec(bits=32), QuantSpec(bits=8, mode="static")):
        copy = QuantizedNetwork.from_network(policy, quant, observations)
        assert torch.equal(copy.normalizer.mean, policy.normalizer.mean)
        assert torch.allclose(copy(observations), policy(observations), atol=0.05 if quant.bits == 8 else 1e-6)


def test_planned_updates_and_the_annealed_clip_range_follow_the_rollouts():
    learner = PPO(DISCRETE, hidden=(8,), epochs=3, minibatch_size=50, clip_range=0.2, clip_range_final_fraction=0.0)
    attach_trainer(learner, total_frames=1000, frames_per_batch=100, policy_version=0)
    assert learner.planned_updates(1000) == 10 * 3 * 2
    assert learner.current_clip_range() == pytest.approx(0.2)
    learner.learner_steps = 30
    assert learner.current_clip_range() == pytest.approx(0.1)
    with pytest.raises(ValueError, match="epochs and minibatch_size"):
        PPO(DISCRETE, epochs=0)


def test_the_logged_losses_are_minibatch_means_and_the_clip_fractions_count_ratios_outside_the_range():
    """Two epochs of four minibatches; a clip range so narrow that the second epoch's ratios
    leave it more often than the first's (whose first minibatch has every ratio 1)."""
    learner, terms, seen = trained_once(CONTINUOUS, QuantSpec(bits=32), clip_range=1e-4)
    assert len(seen) == 8
    for name in ("loss_policy", "loss_value", "entropy"):
        assert float(terms[name]) == pytest.approx(sum(s["terms"][name] for s in seen) / 8, rel=1e-6)
    outside = [float(((s["ratio"] - 1).abs() > 1e-4).sum()) for s in seen]
    assert 0 < sum(outside[:4]) < sum(outside[4:])
    assert float(terms["clip_fraction"]) == pytest.approx(sum(outside) / (2 * ENVS * STEPS))
    assert float(terms["clip_fraction_first_epoch"]) == pytest.approx(sum(outside[:4]) / (ENVS * STEPS))
    assert float(terms["clip_range"]) == pytest.approx(1e-4)


def test_adam_takes_the_learners_epsilon():
    learner = PPO(DISCRETE, hidden=(8,), adam_eps=1e-5)
    attach_trainer(learner, frames_per_batch=ENVS * STEPS, policy_version=0)
    assert learner.optimizers().optimizer.param_groups[0]["eps"] == 1e-5


def test_the_clip_range_anneals_to_its_final_fraction_and_stays_there():
    learner = PPO(DISCRETE, hidden=(8,), epochs=1, minibatch_size=100, clip_range=0.2, clip_range_final_fraction=0.5)
    assert learner.current_clip_range() == pytest.approx(0.2)  # no run attached: the initial range
    assert learner.planned_updates(1000) == 10  # no run attached: the budget is one batch of 10 minibatches
    attach_trainer(learner, total_frames=1000, frames_per_batch=100, policy_version=0)
    learner.learner_steps = 5
    assert learner.current_clip_range() == pytest.approx(0.2 * (1 - 0.5 * 0.5))
    learner.learner_steps = 25  # past the planned 10: the final range, not below it
    assert learner.current_clip_range() == pytest.approx(0.1)
    learner.clip_range_final_fraction = 1.0
    assert learner.current_clip_range() == pytest.approx(0.2)
    short = PPO(DISCRETE, hidden=(8,), epochs=1, minibatch_size=100, clip_range=0.2, clip_range_final_fraction=0.0)
    attach_trainer(short, total_frames=100, frames_per_batch=100, policy_version=0)
    short.learner_steps = 1  # a run of one planned update ends at the final range
    assert short.planned_updates(100) == 1 and short.current_clip_range() == pytest.approx(0.0)
    uneven = PPO(DISCRETE, hidden=(8,), epochs=1, minibatch_size=64)
    attach_trainer(uneven, total_frames=1000, frames_per_batch=100, policy_version=0)
    assert uneven.planned_updates(1000) == 10 * 2  # 2 minibatches (64 + 36) per batch of 100, not 1000 / 64


def test_asynchronous_ppo_uses_vtrace_and_drops_rollouts_that_lag_too_far():
    torch.manual_seed(2)
    learner = PPO(DISCRETE, hidden=(16,), epochs=1, minibatch_size=64, max_policy_lag=2, orthogonal_init=False)
    attach_trainer(learner, frames_per_batch=ENVS * STEPS, policy_version=5)
    learner.asynchronous = True
    rollout = collect(learner, QuantSpec(bits=8, mode="dynamic"))
    steps, _ = learner.prepare(rollout)
    fields = rollout_fields(rollout)
    with torch.no_grad():
        value = learner.value(fields["observation"]).squeeze(-1)
        next_value = learner.value(fields["next_observation"]).squeeze(-1)
        log_ratio = learner.policy.log_prob(fields["observation"], fields["action"]) - fields["log_prob"]
    targets, advantage = vtrace(log_ratio, fields["reward"], value, next_value, fields["terminated"], fields["done"],
                                learner.gamma, learner.gae_lambda)
    assert torch.allclose(steps["return"], targets.reshape(-1), atol=1e-5)
    assert torch.allclose(steps["advantage"], advantage.reshape(-1), atol=1e-5)
    rollout["policy_version"][:] = 3  # two versions behind: trained on
    assert learner.learn(rollout, new_frames=ENVS * STEPS) and learner.learner_steps == 2
    rollout["policy_version"][1, :5] = 2  # three: dropped, counted
    assert learner.learn(rollout, new_frames=ENVS * STEPS) == {} and learner.learner_steps == 2
    assert learner.stale_frames == ENVS * STEPS and learner.log_values()["collect/stale_frames"] == ENVS * STEPS
    assert learner.counters()["stale_frames"] == ENVS * STEPS
    assert learner.learn(rollout, new_frames=ENVS * STEPS) == {} and learner.stale_frames == 2 * ENVS * STEPS  # summed


def test_the_env_clips_the_unbounded_actions_a_gaussian_policy_samples():
    """MountainCarContinuous charges 0.1 * action**2 on the action it is given: stepped with
    100, the lean env's clip to [-1, 1] keeps the charge at 0.1, not 1000."""
    from actorq.envs import make_batched_env

    env = make_batched_env("MountainCarContinuous-v0", 2, seed=0)
    env.reset()
    step = env.step_numpy(np.array([[100.0], [-100.0]], dtype=np.float32))
    assert step.reward.ravel().tolist() == pytest.approx([-0.1, -0.1])


def test_under_bf16_autocast_only_the_trunk_is_bf16_and_log_probs_values_and_losses_are_fp32():
    """A bf16-mixed learner autocasts the convolutional trunk; the output layers run in fp32 on
    its features, so the log-probabilities (and the ratios, weights and KL made of them), the
    values, the advantages and the losses carry no bf16 rounding (~0.008 near ln 4)."""
    torch.manual_seed(0)
    frames_spec = EnvSpec(obs_dim=4 * 84 * 84, discrete=True, num_actions=4, frame_shape=(4, 84, 84))
    learner = PPO(frames_spec, pixel_trunk="nature")
    frames = torch.randint(0, 256, (2, 9, 4, 84, 84), dtype=torch.uint8)
    shape = (2, 8)
    rollout = TensorDict({
        "observation": frames[:, :-1], "action": torch.randint(0, 4, shape),
        "log_prob": torch.full(shape, -math.log(4.0)), "policy_version": torch.zeros(shape, dtype=torch.int64),
        "next": {"observation": frames[:, 1:], "reward": torch.randn(*shape, 1),
                 "terminated": torch.zeros(*shape, 1, dtype=torch.bool), "done": torch.zeros(*shape, 1, dtype=torch.bool)},
    }, batch_size=shape)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        steps, correction = learner.prepare(rollout)
        _, terms, ratio = learner._loss(steps, clip=0.1)
        hidden = learner.policy.trunk[0](steps["observation"])
    assert hidden.dtype == torch.bfloat16  # the trunk itself still runs in bf16
    logits = learner.policy.trunk[1](hidden.float())
    expected = torch.log_softmax(logits, -1).gather(-1, steps["action"].reshape(-1, 1)).squeeze(-1)
    assert steps["prox_log_prob"].dtype == torch.float32
    assert torch.allclose(steps["prox_log_prob"], expected, atol=1e-6)
    for tensor in (steps["advantage"], steps["return"], steps["weight"], ratio, correction["kl_behaviour"],
                   *terms.values()):
        assert tensor.dtype == torch.float32


@pytest.mark.parametrize("spec", [DISCRETE, CONTINUOUS], ids=["categorical", "gaussian"])
def test_a_minibatch_in_micro_batches_makes_the_same_update_as_the_whole_minibatch(spec):
    """Parts of 5 rows of a 32-row minibatch (the last part of 2): the same gradient step, the
    same logged terms and ratios as the minibatch at once, advantages normalized over all 32."""
    def updated(micro_batch_size):
        torch.manual_seed(3)
        learner = PPO(spec, hidden=(16, 16), minibatch_size=32, micro_batch_size=micro_batch_size)
        attach_trainer(learner, frames_per_batch=ENVS * STEPS, policy_version=0)
        steps, _ = learner.prepare(collect(learner, QuantSpec(bits=32)))
        batch = {name: tensor[:32] for name, tensor in steps.items()}
        batch["advantage"] = batch["advantage"] * 3 + 1  # a mean and scale of their own to normalize
        terms, ratio = learner.update_minibatch(batch, clip=0.2)  # the first: every ratio 1
        terms, ratio = learner.update_minibatch(batch, clip=0.2)  # ratios away from 1: clipping counts
        return learner, terms, ratio

    whole, whole_terms, whole_ratio = updated(None)
    parts, part_terms, part_ratio = updated(5)
    assert not torch.allclose(whole_ratio, torch.ones_like(whole_ratio))
    assert torch.allclose(part_ratio, whole_ratio, atol=1e-6)
    for name, value in whole_terms.items():
        assert float(part_terms[name]) == pytest.approx(float(value), rel=1e-5, abs=1e-7), name
    for mine, theirs in zip(parts.parameters(), whole.parameters(), strict=True):
        assert torch.allclose(mine, theirs, atol=1e-6)
    assert parts.learner_steps == whole.learner_steps == 2


def test_the_pixel_learner_bench_computes_values_in_the_learners_chunks():
    from actorq.algos.ppo import VALUE_CHUNK
    from actorq.bench import pixel_learner

    assert pixel_learner.VALUE_CHUNK == VALUE_CHUNK  # a copy: the bench's loop runs where only torch is
