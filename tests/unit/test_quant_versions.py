"""A load is one whole policy version to every reader: payload, head state (a learned log-std),
observation statistics and the pushed version number actors record change together, never
one before the others.

A reader here is what an actor worker is: a network of its own whose tensors are the writer's
very memory (TorchRL's shared-memory sync hands them over with ``TensorDict.to_module``). The
write is driven one torch call at a time: after each, the reader samples, so every state a
concurrent reader could meet is met, with no timing involved.
"""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict
from torch.overrides import TorchFunctionMode

from actorq.algos.networks import GaussianPolicy
from actorq.envs import EnvSpec
from actorq.quant import QuantizedNetwork, QuantSpec, quantize
from actorq.util.errors import ConfigError

SPEC = EnvSpec(obs_dim=3, discrete=False, action_dim=2, action_low=(-2.0, -2.0), action_high=(2.0, 2.0))
QUANT = QuantSpec(bits=8, mode="static")


def _policy(seed: int, log_std: float, obs_shift: float) -> GaussianPolicy:
    """A policy whose weights, log-std and observation statistics all differ by ``seed``."""
    torch.manual_seed(seed)
    policy = GaussianPolicy(SPEC, hidden=(16,), log_std_init=log_std, normalize_observations=True)
    policy.normalizer.update(torch.randn(256, SPEC.obs_dim) * (1 + seed) + obs_shift)
    return policy


@pytest.fixture(scope="module")
def calibration() -> torch.Tensor:
    torch.manual_seed(7)
    return torch.randn(256, SPEC.obs_dim) * 3


@pytest.fixture(scope="module")
def observations() -> torch.Tensor:
    torch.manual_seed(8)
    return torch.randn(32, SPEC.obs_dim) * 3


def _load(network: QuantizedNetwork, policy: GaussianPolicy, calibration: torch.Tensor, number: int = 0) -> None:
    network.load_version(quantize(policy, QUANT, calibration), policy.head.state_dict(),
                         policy.normalizer.state_dict(), policy_version=number)


def _sampled(network: QuantizedNetwork, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    torch.manual_seed(0)  # the same noise for every network
    action, log_prob, number = network.sample_with_log_prob_and_version(observations)
    return action, log_prob, int(number)


class _ReadAfterEveryCall(TorchFunctionMode):
    """Runs ``read`` after every torch call made under it (not inside ``read`` itself)."""

    def __init__(self, read):
        super().__init__()
        self.read = read

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.read()
        return out


def test_a_reader_meets_the_old_version_or_the_new_one_whole_at_every_step_of_a_load(calibration, observations):
    old, new = _policy(1, log_std=-1.0, obs_shift=0.0), _policy(2, log_std=0.5, obs_shift=5.0)
    writer = QuantizedNetwork.template_for(old, QUANT)
    _load(writer, old, calibration, number=1)
    reader = copy.deepcopy(writer)
    TensorDict.from_module(writer).to_module(reader)  # a worker: the writer's memory, its own build
    expected = {}
    for number, (name, policy) in enumerate((("old", old), ("new", new)), start=1):
        network = QuantizedNetwork.template_for(policy, QUANT)
        _load(network, policy, calibration, number)
        expected[name] = _sampled(network, observations)
    assert not torch.allclose(expected["old"][1], expected["new"][1])
    _sampled(reader, observations)  # the reader has built the old version

    seen: list[str] = []

    def read() -> None:
        action, log_prob, number = _sampled(reader, observations)
        matches = [name for name, (want_action, want_log_prob, want_number) in expected.items()
                   if torch.equal(action, want_action) and torch.equal(log_prob, want_log_prob) and number == want_number]
        seen.append(matches[0] if matches else "torn")

    with _ReadAfterEveryCall(read):
        _load(writer, new, calibration, number=2)

    assert "torn" not in seen, f"a reader ran a mix of two versions: {seen}"
    assert seen[0] == "old" and seen[-1] == "new"
    assert seen == sorted(seen, key=["old", "new"].index), seen  # never back to the old one


def test_a_version_that_does_not_fit_is_refused_before_anything_is_written(calibration, observations):
    policy = _policy(1, log_std=-1.0, obs_shift=0.0)
    network = QuantizedNetwork.from_network(policy, QUANT, calibration)
    _load(network, policy, calibration)
    before = {name: tensor.clone() for name, tensor in network.state_dict().items()}
    other = _policy(2, log_std=0.5, obs_shift=5.0)
    payload, normalizer = quantize(other, QUANT, calibration), other.normalizer.state_dict()
    with pytest.raises(ConfigError, match="head state"):
        network.load_version(payload, {"log_std": other.head.log_std.detach()}, normalizer)
    with pytest.raises(ConfigError, match="normalizer tensor mean"):
        network.load_version(payload, other.head.state_dict(), {**normalizer, "mean": torch.zeros(5)})
    after = network.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)


def test_actors_label_each_step_with_the_version_that_took_it(calibration, observations):
    """The label comes from the snapshot that sampled the action, not from a buffer a push
    writes after the version (a worker between the two would mislabel its steps)."""
    from actorq.actors.policy import ExplorationPolicy

    policy = _policy(1, log_std=-1.0, obs_shift=0.0)
    network = QuantizedNetwork.template_for(policy, QUANT)
    actor = ExplorationPolicy(network, SPEC, noise_scale=0.0, stochastic=True, records=("log_prob", "policy_version"))
    _load(network, policy, calibration, number=5)
    actor.policy_version.fill_(4)  # the push has not reached the wrapper's buffer yet
    _, _, recorded = actor(observations)
    assert recorded.tolist() == [5] * len(observations)
