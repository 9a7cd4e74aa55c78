"""Quantized actors in real worker processes: a pushed payload changes what every worker does.

Two TorchRL worker processes run cheetah-run (1000-step episodes, so during this test each
worker stays in one trajectory and its ``traj_ids`` names it). Their policy's network is a
:class:`QuantizedNetwork` (int8 static). Every collected action is matched against the same
quantized network computed on the learner side for payload A and payload B. A PPO policy
(learned log-std, observation statistics) on Pendulum-v1 records log-probabilities while
versions are pushed, each matched against the main process's copy of every version.
"""

from __future__ import annotations

import copy

import pytest
import torch

from actorq.actors.base import ActorSpec
from actorq.actors.policy import ExplorationPolicy
from actorq.actors.pool import ActorPool
from actorq.envs import EnvSpec, make_env
from actorq.algos.networks import DeterministicActor, GaussianPolicy
from actorq.quant import QuantizedNetwork, QuantSpec, action_error, quantize

ENV = "cheetah-run"
HIDDEN = (64, 64)
NUM_WORKERS = 2
FRAMES_PER_BATCH = 20
TOTAL_FRAMES = 1600  # < 2 x 1000-step episodes: no worker starts a second trajectory
SAME = 1e-4  # the worker runs the very same int8 kernels on the very same payload

pytestmark = pytest.mark.timeout(300)


def _random_actor(spec: EnvSpec, seed: int) -> DeterministicActor:
    torch.manual_seed(seed)
    actor = DeterministicActor(spec, HIDDEN)
    with torch.no_grad():
        for p in actor.parameters():
            p.mul_(3.0)  # larger weights: A's and B's actions differ far beyond int8 rounding
    return actor


def _label(actions: torch.Tensor, expected: dict[str, torch.Tensor]) -> list[str]:
    """For each row, which payload's learner-side output it equals ("?" if none)."""
    labels = []
    for row, action in enumerate(actions):
        matches = [name for name, out in expected.items() if (action - out[row]).abs().max() < SAME]
        labels.append(matches[0] if matches else "?")
    return labels


def test_pushed_payloads_reach_every_worker():
    spec = EnvSpec.from_env(make_env(ENV))
    quant = QuantSpec(bits=8, mode="static")
    template = QuantizedNetwork.template_for(_random_actor(spec, seed=0), quant)
    policy = ExplorationPolicy(template, spec, noise_scale=0.0)
    learner = {"A": _random_actor(spec, seed=1), "B": _random_actor(spec, seed=2)}
    learner_side: dict[str, QuantizedNetwork] = {"template": QuantizedNetwork.template_for(_random_actor(spec, seed=0), quant)}
    labels: dict[int, list[str]] = {}  # worker (its trajectory id) -> label of every step
    rows: list[tuple[torch.Tensor, torch.Tensor]] = []
    pool = ActorPool(ActorSpec(ENV, num_workers=NUM_WORKERS, frames_per_batch=FRAMES_PER_BATCH,
                     total_frames=TOTAL_FRAMES, seed=0), policy)
    try:
        for batch in pool:
            observations, actions = batch["observation"], batch["action"]
            if "A" not in learner_side:
                _push(pool, policy, learner["A"], quant, _calibration(observations), learner_side, "A")
            expected = {name: net(observations) for name, net in learner_side.items()}
            worker = int(batch["collector", "traj_ids"].unique().item())
            labels.setdefault(worker, []).extend(_label(actions, expected))
            rows.append((observations, actions))
            if "B" not in learner_side and _all_reached(labels, "A"):
                _push(pool, policy, learner["B"], quant, _calibration(observations), learner_side, "B")
            elif "B" in learner_side and _all_reached(labels, "B"):
                break
    finally:
        pool.shutdown()

    assert len(labels) == NUM_WORKERS, f"expected one trajectory per worker, got {sorted(labels)}"
    for worker, seen in labels.items():
        assert "?" not in seen, f"worker {worker} ran something that is neither payload: {seen}"
        assert _phases(seen) == ["template", "A", "B"][-len(_phases(seen)):], f"worker {worker}: {seen}"
        assert seen[-1] == "B", f"worker {worker} never ran payload B: {seen}"
        assert "A" in seen, f"worker {worker} never ran payload A: {seen}"
    observations = torch.cat([obs for obs, _ in rows])
    # The payloads really differ, and each is a faithful int8 copy of its learner network.
    assert action_error(learner_side["A"], learner_side["B"], observations) > 0.1
    for name in ("A", "B"):
        assert action_error(learner[name], learner_side[name], observations) < 0.1


def _calibration(observations: torch.Tensor) -> torch.Tensor:
    """Recent observations, widened: the first steps alone do not span a whole episode."""
    return torch.cat([observations, 3 * torch.randn(512, observations.shape[-1])])


def _push(pool, policy, actor, quant, calibration, learner_side, name) -> None:
    payload = quantize(actor, quant, calibration=calibration)
    policy.network.load_payload(payload)
    pool.push(policy)
    learner_side[name] = QuantizedNetwork.from_network(actor, quant, calibration=calibration)


def _all_reached(labels: dict[int, list[str]], name: str) -> bool:
    return len(labels) == NUM_WORKERS and all(seen[-FRAMES_PER_BATCH:] == [name] * FRAMES_PER_BATCH
                                              for seen in labels.values())


def _phases(seen: list[str]) -> list[str]:
    """Consecutive distinct labels, e.g. ``["template", "A", "B"]``."""
    return [label for i, label in enumerate(seen) if i == 0 or seen[i - 1] != label]


LOG_PROB_ENV = "Pendulum-v1"


def _gaussian_policy(spec: EnvSpec, seed: int, log_std: float) -> GaussianPolicy:
    """A PPO policy whose weights, log-std and observation statistics all differ by ``seed``."""
    torch.manual_seed(seed)
    policy = GaussianPolicy(spec, hidden=(16,), log_std_init=log_std, normalize_observations=True)
    policy.normalizer.update(torch.randn(256, spec.obs_dim) * (1 + seed) + seed)
    return policy


def test_every_recorded_log_prob_is_one_pushed_version_s_under_asynchronous_pushes():
    """Two workers sample on while versions are pushed (asynchronous collection): the
    log-probability each step records is that of one whole version, as the main process
    computes it on the same observation and action, and the pushed versions are run."""
    spec = EnvSpec.from_env(make_env(LOG_PROB_ENV))
    quant = QuantSpec(bits=8, mode="static")
    calibration = 3 * torch.randn(512, spec.obs_dim)
    learners = [_gaussian_policy(spec, seed, log_std) for seed, log_std in enumerate((-1.5, -0.5, 0.5))]
    copies = [QuantizedNetwork.from_network(learner, quant, calibration) for learner in learners]
    policy = ExplorationPolicy(copy.deepcopy(copies[0]), spec, noise_scale=0.0, stochastic=True,
                               records=("log_prob", "policy_version"))
    pool = ActorPool(ActorSpec(LOG_PROB_ENV, num_workers=NUM_WORKERS, frames_per_batch=FRAMES_PER_BATCH,
                     total_frames=60 * FRAMES_PER_BATCH, seed=0), policy)
    labels: list[int | None] = []
    try:
        for batch in pool:
            batch_labels = [_version_of(copies, row) for row in batch]
            labels += batch_labels
            pushed = int(policy.policy_version)
            if pushed + 1 < len(learners) and batch_labels.count(pushed) == len(batch_labels):
                _push_version(pool, policy, learners[pushed + 1], quant, calibration, pushed + 1)
            elif pushed + 1 == len(learners) and batch_labels.count(pushed) == len(batch_labels):
                break
    finally:
        pool.shutdown()

    assert None not in labels, f"{labels.count(None)} of {len(labels)} recorded log-probs belong to no pushed version"
    assert set(labels) == {0, 1, 2}, labels


def _version_of(copies: list[QuantizedNetwork], step) -> int | None:
    """The version whose main-process copy gives ``step``'s recorded log-prob (``None``: none)."""
    observation, action = step["observation"].unsqueeze(0), step["action"].unsqueeze(0)
    for version, network in enumerate(copies):
        built = network.built()
        log_prob = built.head.log_prob(network.features(observation), action)
        if (log_prob - step["log_prob"]).abs().max() < SAME:
            return version
    return None


def _push_version(pool, policy, learner, quant, calibration, version: int) -> None:
    policy.network.load_version(quantize(learner, quant, calibration), learner.head.state_dict(),
                                learner.normalizer.state_dict())
    policy.policy_version.fill_(version)
    pool.push(policy)
