"""Learner-side payloads and the actors' QuantizedNetwork agree, at every precision."""

from __future__ import annotations

import pickle
import threading
import time

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from actorq.envs import EnvSpec
from actorq.util.errors import ConfigError
from actorq.actors.policy import ExplorationPolicy, actor_policy
from actorq.algos.base import Exploration
from actorq.algos.dqn import DQN
from actorq.algos.sac import SAC
from actorq.algos.networks import DeterministicActor, GaussianActor, QNetwork, mlp
from actorq.quant import (
    QuantizedNetwork,
    QuantSpec,
    TrunkLayout,
    action_agreement,
    action_error,
    fidelity_metrics,
    payload_nbytes,
    quantize,
    reference_module,
    weight_error,
)
from actorq.quant import onednn
from tests.helpers import assert_computes_the_reference


CONTINUOUS = EnvSpec(obs_dim=17, discrete=False, action_dim=6, action_low=(-1.0,) * 6, action_high=(1.0,) * 6)
DISCRETE = EnvSpec(obs_dim=8, discrete=True, num_actions=4)
HIDDEN = (64, 64)
PLAIN_DTYPES = {torch.int8, torch.uint8, torch.int32, torch.float32, torch.bfloat16}

INT8_SPECS = [
    QuantSpec(bits=8, mode=mode, granularity=granularity, calibration=calibration)
    for mode in ("static", "dynamic")
    for granularity in ("per_tensor", "per_channel")
    for calibration in ("minmax", "moving_average", "histogram")
    if mode == "static" or calibration == "minmax"
] + [QuantSpec(bits=8, mode="static", observer="fixed", input_range=(-4.0, 4.0), activation_max=8.0)]
# the same codes on plain int8 tensors and oneDNN's kernels, where torch has them
INT8_SPECS += [QuantSpec(bits=8, mode=mode, granularity=granularity, engine="plain")
               for mode in ("static", "dynamic") for granularity in ("per_tensor", "per_channel") if onednn.available()]
ALL_SPECS = [QuantSpec(bits=32), QuantSpec(bits=16), *INT8_SPECS] + [
    QuantSpec(bits=b, mode="dynamic", granularity=g) for b in (2, 4, 7) for g in ("per_tensor", "per_channel")
] + [QuantSpec(bits=4, format="int4_packed")]


@pytest.fixture(scope="module")
def actor() -> DeterministicActor:
    torch.manual_seed(0)
    return DeterministicActor(CONTINUOUS, HIDDEN).eval()


@pytest.fixture(scope="module")
def observations() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(512, CONTINUOUS.obs_dim)


class LayerNormPolicy(nn.Module):
    """A policy whose trunk has LayerNorm blocks (the other shape mlp() builds)."""

    def __init__(self):
        super().__init__()
        self.trunk = mlp(CONTINUOUS.obs_dim, HIDDEN, CONTINUOUS.action_dim, layer_norm=True)
        self.head = nn.Tanh()

    def forward(self, x):
        return self.head(self.trunk(x))


@pytest.mark.parametrize("spec", ALL_SPECS, ids=QuantSpec.describe)
def test_payload_holds_plain_tensors_that_fit_the_template(spec, actor, observations):
    payload = quantize(actor, spec, calibration=observations)
    assert all(type(t) is torch.Tensor and t.dtype in PLAIN_DTYPES for t in payload.values())
    template = QuantizedNetwork.template_for(actor, spec)
    assert {k: (v.shape, v.dtype) for k, v in template.payload().items()} == {
        k: (v.shape, v.dtype) for k, v in payload.items()
    }
    # TorchRL's weight sync sees exactly what TensorDict.from_module sees.
    synced = TensorDict.from_module(template).keys()
    assert set(payload) | {"version"} <= set(synced)


@pytest.mark.parametrize("spec", INT8_SPECS, ids=lambda s: f"{s.describe()} {s.observer} {s.calibration}")
def test_int8_actors_compute_what_torch_ao_converted_but_for_rounding_ties(spec, actor, observations):
    quantized = QuantizedNetwork.from_network(actor, spec, calibration=observations)
    reference = reference_module(actor, spec, calibration=observations)
    assert_computes_the_reference(quantized(observations), reference(observations))
    assert action_error(actor, quantized, observations) < 0.03


@pytest.mark.parametrize("spec", ALL_SPECS, ids=QuantSpec.describe)
def test_quantized_actions_stay_close_to_fp32(spec, actor, observations):
    quantized = QuantizedNetwork.from_network(actor, spec, calibration=observations)
    tolerance = {32: 0.0, 16: 0.01, 8: 0.03, 7: 0.03, 4: 0.1, 2: 0.5}[spec.bits]
    assert action_error(actor, quantized, observations) <= tolerance


def test_fp32_payload_is_the_network_itself(actor, observations):
    quantized = QuantizedNetwork.from_network(actor, QuantSpec(bits=32))
    torch.testing.assert_close(quantized(observations), actor(observations), atol=0, rtol=0)


def test_bf16_halves_the_payload_and_runs_in_bf16(actor, observations):
    payload = quantize(actor, QuantSpec(bits=16))
    assert {t.dtype for t in payload.values()} == {torch.bfloat16}
    assert payload_nbytes(payload) * 2 == payload_nbytes(quantize(actor, QuantSpec(bits=32)))
    quantized = QuantizedNetwork.from_network(actor, QuantSpec(bits=16))
    out = quantized(observations)
    assert out.dtype == torch.float32
    assert 0 < (out - actor(observations)).abs().max() < 0.02


@pytest.mark.parametrize("bits", range(2, 8))
@pytest.mark.parametrize("granularity", ["per_tensor", "per_channel"])
def test_simulated_bits_leave_at_most_2_to_the_n_levels(bits, granularity, actor):
    spec = QuantSpec(bits=bits, mode="dynamic", granularity=granularity)
    payload = quantize(actor, spec)
    for k, weight in enumerate(spec.codec.dequantized_weights(TrunkLayout.from_trunk(actor.trunk), spec, payload)):
        groups = [weight] if granularity == "per_tensor" else list(weight)
        assert max(g.unique().numel() for g in groups) <= 2**bits
        codes = payload[f"l{k}_weight"]
        assert -(2 ** (bits - 1)) <= codes.min() and codes.max() <= 2 ** (bits - 1) - 1


def test_fewer_bits_mean_larger_errors(actor, observations):
    errors = [
        weight_error(actor, quantize(actor, spec), spec)
        for spec in (QuantSpec(bits=b, mode="dynamic") for b in (2, 3, 4, 5, 6, 7, 8))
    ]
    assert errors == sorted(errors, reverse=True)
    assert errors[-1] < 0.01 < errors[0]


def test_int8_payload_of_the_quarl_actor_is_a_quarter_of_fp32():
    torch.manual_seed(0)
    wide = DeterministicActor(CONTINUOUS, (2048, 2048, 2048))
    fp32 = payload_nbytes(quantize(wide, QuantSpec(bits=32)))
    for spec in (QuantSpec(bits=8, mode="dynamic"), QuantSpec(bits=8, mode="static", observer="fixed")):
        ratio = payload_nbytes(quantize(wide, spec)) / fp32
        assert ratio <= 0.26, f"{spec.describe()}: {ratio:.4f}"


def test_load_payload_bumps_version_and_changes_actions(actor, observations):
    spec = QuantSpec(bits=8, mode="static")
    template = QuantizedNetwork.template_for(actor, spec)
    before, version = template(observations), int(template.version)
    assert torch.all(before == 0)  # an empty template acts at the centre of the action box
    template.load_payload(quantize(actor, spec, calibration=observations))
    assert int(template.version) > version
    assert_computes_the_reference(template(observations), reference_module(actor, spec, observations)(observations))
    other = DeterministicActor(CONTINUOUS, HIDDEN)
    template.load_payload(quantize(other, spec, calibration=observations))
    assert action_error(other, template, observations) < 0.03


def test_in_place_buffer_writes_with_a_new_version_rebuild_the_trunk(actor, observations):
    """What TorchRL's shared-memory sync does in a worker: copy buffers, version included."""
    spec = QuantSpec(bits=8, mode="dynamic")
    worker = QuantizedNetwork.template_for(actor, spec)
    worker(observations)
    learner_copy = QuantizedNetwork.from_network(actor, spec)
    TensorDict.from_module(worker).update_(TensorDict.from_module(learner_copy))
    torch.testing.assert_close(worker(observations), learner_copy(observations), atol=0, rtol=0)


@pytest.mark.parametrize("spec", ALL_SPECS, ids=QuantSpec.describe)
def test_a_push_in_progress_leaves_the_built_trunk_untouched(spec, actor, observations):
    """A push rewrites the buffers in place and bumps ``version`` last: until then a worker
    must keep running the payload it built, not a mix of the old one and the new buffers."""
    worker = QuantizedNetwork.from_network(actor, spec, calibration=observations)
    before = worker(observations).clone()
    other = QuantizedNetwork.from_network(DeterministicActor(CONTINUOUS, HIDDEN), spec, calibration=observations)
    worker.version_begin.copy_(other.version_begin)
    for name, tensor in worker.payload().items():
        tensor.copy_(other.payload()[name])
    torch.testing.assert_close(worker(observations), before, atol=0, rtol=0)
    worker.version.copy_(other.version)
    torch.testing.assert_close(worker(observations), other(observations), atol=0, rtol=0)


class _CutShort:
    """Passes load_payload's shape and dtype check, then cannot be copied: a write cut short."""

    def __init__(self, like: torch.Tensor):
        self.shape, self.dtype = like.shape, like.dtype


@pytest.mark.parametrize(
    "spec",
    [QuantSpec(bits=32), QuantSpec(bits=8, mode="static"), QuantSpec(bits=8, mode="dynamic"),
     QuantSpec(bits=4, mode="dynamic")],
    ids=QuantSpec.describe,
)
def test_a_reader_never_builds_a_half_written_payload(spec, actor, observations):
    """load_payload writes the very buffers workers read. Cut it short after the first tensor:
    a reader that builds now (a worker that has just seen a new version) must wait for the
    write to finish, not run the first new tensor with the old rest."""
    network = QuantizedNetwork.from_network(actor, spec, calibration=observations)
    new_actor = DeterministicActor(CONTINUOUS, HIDDEN)
    new_payload = quantize(new_actor, spec, calibration=observations)
    first, second = list(network.payload())[:2]
    with pytest.raises(TypeError):
        network.load_payload({**new_payload, second: _CutShort(new_payload[second])})
    assert torch.equal(network.payload()[first], new_payload[first])  # really half-written

    network._forget_trunk()
    built: list[nn.Module] = []
    reader = threading.Thread(target=lambda: built.append(network.executable_trunk()), daemon=True)
    reader.start()
    time.sleep(0.3)
    assert reader.is_alive() and not built, "a reader accepted a half-written payload"
    network.load_payload(new_payload)  # the write completes
    reader.join(timeout=10)
    assert built, "the reader never saw the completed write"
    expected = QuantizedNetwork.from_network(new_actor, spec, calibration=observations).executable_trunk()
    torch.testing.assert_close(built[0](observations), expected(observations), atol=0, rtol=0)


def test_wrong_payload_is_rejected_clearly(actor):
    spec = QuantSpec(bits=8, format="int8_dynamic", mode="dynamic")
    template = QuantizedNetwork.template_for(actor, spec)
    with pytest.raises(ConfigError, match="missing"):
        template.load_payload(quantize(actor, QuantSpec(bits=32)))
    bigger = DeterministicActor(CONTINUOUS, (32, 32))
    with pytest.raises(ConfigError, match="expected torch.int8"):
        template.load_payload(quantize(bigger, spec))


def test_static_learned_needs_calibration_but_fixed_does_not(actor, observations):
    with pytest.raises(ValueError, match="calibration observations"):
        quantize(actor, QuantSpec(bits=8, mode="static"))
    fixed = QuantSpec(bits=8, mode="static", observer="fixed", input_range=(-4.0, 4.0), activation_max=8.0)
    assert action_error(actor, QuantizedNetwork.from_network(actor, fixed), observations) < 0.05


@pytest.mark.parametrize("spec", ALL_SPECS, ids=QuantSpec.describe)
def test_pickled_network_and_any_input_rank(spec, actor, observations):
    quantized = QuantizedNetwork.from_network(actor, spec, calibration=observations)
    batched = quantized(observations[:4])
    clone = pickle.loads(pickle.dumps(quantized))  # as a spawned worker receives it
    torch.testing.assert_close(clone(observations[:4]), batched, atol=0, rtol=0)
    assert quantized(observations[0]).shape == (CONTINUOUS.action_dim,)
    stacked = quantized(observations[:4].reshape(2, 2, -1))
    torch.testing.assert_close(stacked.reshape(4, -1), batched, atol=0, rtol=0)
    if spec.mode == "static" or spec.bits != 8:  # dynamic int8 ranges depend on the batch
        torch.testing.assert_close(quantized(observations[0]), batched[0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("spec", [QuantSpec(bits=8, mode="static"), QuantSpec(bits=8, mode="dynamic"),
                                  QuantSpec(bits=16), QuantSpec(bits=4, mode="dynamic")], ids=QuantSpec.describe)
def test_layer_norm_trunks(spec, observations):
    torch.manual_seed(0)
    policy = LayerNormPolicy().eval()
    quantized = QuantizedNetwork.from_network(policy, spec, calibration=observations)
    assert quantized.layout.layer_norm
    assert action_error(policy, quantized, observations) < 0.05
    if spec.codec.int8_kernels:
        torch.testing.assert_close(
            quantized(observations), reference_module(policy, spec, observations)(observations), atol=1e-6, rtol=0
        )


def test_discrete_q_network_keeps_its_greedy_actions(observations):
    torch.manual_seed(0)
    q_network = QNetwork(DISCRETE, HIDDEN).eval()
    obs = torch.randn(512, DISCRETE.obs_dim)
    quantized = QuantizedNetwork.from_network(q_network, QuantSpec(bits=8, mode="static"), calibration=obs)
    assert action_agreement(q_network, quantized, obs) > 0.9
    assert action_error(q_network, quantized, obs, discrete=True) < 0.1


@pytest.mark.parametrize("spec", ALL_SPECS, ids=QuantSpec.describe)
def test_unsupported_trunks_are_refused_naming_the_module(spec):
    odd = nn.Module()
    odd.trunk = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.1), nn.Linear(4, 1))
    odd.head = nn.Identity()
    with pytest.raises(ConfigError, match=r"Linear -> \[LayerNorm\] -> \[activation\].*trunk\[1\] is Dropout"):
        quantize(odd, spec)
    with pytest.raises(ConfigError, match="trunk\\[1\\] is Dropout"):
        QuantizedNetwork.template_for(odd, spec)


def test_fidelity_metrics_use_the_documented_names(actor, observations):
    quantized = QuantizedNetwork.from_network(actor, QuantSpec(bits=8, mode="dynamic"))
    metrics = fidelity_metrics(actor, quantized, observations, CONTINUOUS)
    assert set(metrics) == {
        "quant/action_error", "quant/action_error_max", "quant/weight_error", "quant/payload_bytes",
        "quant/fp32_bytes", "quant/compression"
    }
    assert 0 < metrics["quant/weight_error"] < 0.01
    assert metrics["quant/compression"] == metrics["quant/payload_bytes"] / metrics["quant/fp32_bytes"]


@pytest.mark.parametrize("spec", [QuantSpec(bits=8, mode="static"), QuantSpec(bits=8, mode="dynamic")],
                         ids=QuantSpec.describe)
def test_stochastic_sac_actor_samples_through_its_quantized_trunk(spec, observations):
    torch.manual_seed(0)
    actor = GaussianActor(CONTINUOUS, HIDDEN).eval()
    template = QuantizedNetwork.template_for(actor, spec)
    template.load_payload(quantize(actor, spec, calibration=observations))
    assert action_error(actor, template, observations) < 0.03  # the squashed means
    policy = ExplorationPolicy(template, CONTINUOUS, noise_scale=0.0, stochastic=True)
    actions = policy(observations)
    assert actions.shape == (len(observations), CONTINUOUS.action_dim)
    assert actions.abs().max() <= 1.0 and actions.std() > 0
    assert policy(observations[0]).shape == (CONTINUOUS.action_dim,)
    torch.testing.assert_close(template.features(observations[0]), template.features(observations[:1])[0])


def test_actor_policy_is_the_learners_policy_at_the_actors_precision():
    torch.manual_seed(0)
    learner = DQN(DISCRETE, Exploration(0.25), hidden=HIDDEN)
    calibration = torch.randn(256, DISCRETE.obs_dim)
    static = QuantSpec(bits=8, mode="static")  # needs the calibration observations
    policy = actor_policy(learner, static, calibration)
    assert isinstance(policy.network, QuantizedNetwork) and policy.network.quant == static
    assert float(policy.noise_scale) == 0.25 and not policy.stochastic
    assert policy.discrete and policy.num_actions == DISCRETE.num_actions
    policy.noise_scale.fill_(0.0)
    with torch.no_grad():
        greedy = learner.q_network(calibration).argmax(-1)
    assert (policy(calibration)[0] == greedy).float().mean() > 0.9  # (action, *records)


def test_actor_policy_of_sac_samples_from_its_quantized_actor():
    torch.manual_seed(0)
    learner = SAC(CONTINUOUS, actor_hidden=HIDDEN)
    policy = actor_policy(learner, QuantSpec(bits=8, mode="dynamic"), torch.randn(64, CONTINUOUS.obs_dim))
    assert policy.stochastic
    actions = policy(torch.zeros(500, CONTINUOUS.obs_dim))
    assert actions.abs().max() <= 1.0 and actions.std(0).min() > 0.1  # one observation, many actions


STATIC_SPECS = [spec for spec in INT8_SPECS if spec.mode == "static"]


@pytest.mark.parametrize("spec", STATIC_SPECS, ids=lambda spec: spec.describe() + " " + spec.observer + " " + spec.calibration)
@pytest.mark.parametrize("norm", [False, True], ids=["plain", "layer-norm"])
def test_the_int8_static_payload_is_what_torch_ao_converts(spec, norm, observations):
    """The payload is read from the calibrated observers without torch.ao's conversion (which
    packs every weight for a kernel, then had to be unpacked): the same codes, scales, zero
    points, biases and activation qparams as the converted modules hold, bit for bit."""
    from actorq.quant import _ao
    from actorq.quant.codecs.int8_static import Int8Static

    torch.manual_seed(2)
    layers = [nn.Linear(17, 32), *([nn.LayerNorm(32)] if norm else []), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
              nn.Linear(32, 6)]
    trunk = nn.Sequential(*layers).eval()
    payload = Int8Static().encode(trunk, TrunkLayout.from_trunk(trunk), spec, observations)
    converted = _ao.convert_static(trunk, observations, spec)
    expected = {"input_scale": converted.quant.scale.float().reshape(1),
                "input_zero_point": converted.quant.zero_point.to(torch.int32).reshape(1)}
    for k, (linear, layer_norm) in enumerate(_ao.quantized_layers(converted)):
        qparams = {"scale": torch.tensor([float(linear.scale)]), "zero_point": torch.tensor([int(linear.zero_point)])}
        expected.update({f"l{k}_{name}": value for name, value in {**_ao.linear_codes(linear), **qparams}.items()})
        if layer_norm is not None:
            expected.update({f"l{k}_norm_{name}": value for name, value in {
                **_ao.layer_norm_params(layer_norm), "scale": torch.tensor([float(layer_norm.scale)]),
                "zero_point": torch.tensor([int(layer_norm.zero_point)])}.items()})
    assert sorted(payload) == sorted(expected)
    for name, value in expected.items():
        assert torch.equal(payload[name], value.to(payload[name].dtype)), name
