"""Convolutional policies' int8 copies on plain tensors (``quant.engine=plain``,
:mod:`actorq.quant.plain_conv`): what the actors run from a payload, without torch.ao or a
quantized dtype, close to the fp32 policy, on each actor CPU's own activation bits."""

from __future__ import annotations

import copy
import pickle
import warnings

import pytest
import torch
from torch import nn

from actorq.algos.conv import PixelQNetwork
from actorq.algos.ppo import PPO
from actorq.envs import EnvSpec
from actorq.quant import QuantizedNetwork, QuantSpec, onednn, plain_conv, quantize
from actorq.quant.fidelity import weight_error
from actorq.quant.quantize import payload_nbytes
from actorq.util.errors import ConfigError

pytestmark = pytest.mark.skipif(not onednn.available(), reason="this torch build has no oneDNN int8 kernels")

FRAMES = EnvSpec(obs_dim=4 * 84 * 84, discrete=True, num_actions=4, frame_shape=(4, 84, 84))
PLAIN = QuantSpec(bits=8, mode="static", engine="plain")
ALL_INT8 = QuantSpec(bits=8, mode="static", engine="plain", format="int8_static")


def _frames(count: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (count, 4, 84, 84), dtype=torch.uint8, generator=generator)


@pytest.fixture(scope="module", params=["nature", "impala"])
def policy(request) -> nn.Module:
    torch.manual_seed(0)
    return PPO(FRAMES, pixel_trunk=request.param).policy.eval()


def _trained(policy: nn.Module) -> nn.Module:
    changed = copy.deepcopy(policy)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for parameter in changed.parameters():
            parameter.mul_(1 + 0.5 * torch.rand(parameter.shape, generator=generator))
    return changed


@pytest.mark.parametrize("spec", [PLAIN, QuantSpec(bits=8, mode="static")], ids=["plain", "bits8-default"])
def test_a_push_builds_and_runs_the_copy_with_every_warning_an_error(policy, spec):
    """No torch.ao, no quantized tensor on either side of a push, named or by default
    (``quant.bits=8`` alone): torch warns at both (deprecations), and a warning here fails the
    test."""
    calibration, frames = _frames(32), _frames(8, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        actors = QuantizedNetwork.template_for(policy, spec)
        payload = quantize(policy, spec, calibration)
        actors.load_payload(payload)
        logits = actors(frames)
    assert {tensor.dtype for tensor in payload.values()} == {torch.int8, torch.float32}
    modules = list(actors.executable_trunk().modules())
    assert not any(type(module).__module__.startswith("torch.ao") for module in modules)
    assert any(isinstance(module, onednn.Int8Conv2d) for module in modules)
    with torch.no_grad():  # an int8 copy of the policy: on noise frames, measured 1-2% of the largest logit
        reference = policy(frames)
        assert (logits - reference).abs().max() < 0.05 * reference.abs().max()


def test_the_actors_copy_is_what_the_learners_reference_computes_and_pickles_to_a_worker(policy):
    calibration, frames = _frames(32), _frames(4, seed=1)
    learner = _trained(policy)
    actors = QuantizedNetwork.template_for(policy, PLAIN)
    actors.load_payload(quantize(learner, PLAIN, calibration))
    reference = PLAIN.codec.reference(learner.trunk, PLAIN, calibration)
    assert torch.equal(actors.features(frames), reference(frames))
    copied = pickle.loads(pickle.dumps(actors))
    assert torch.equal(copied.features(frames), reference(frames))


def test_a_new_version_changes_the_copy_and_its_payload_is_a_quarter_of_fp32s(policy):
    calibration, frames = _frames(32), _frames(4, seed=2)
    actors = QuantizedNetwork.from_network(policy, PLAIN, calibration)
    before = actors.features(frames).clone()
    actors.load_payload(quantize(_trained(policy), PLAIN, calibration))
    assert not torch.equal(actors.features(frames), before)
    fp32 = quantize(policy, QuantSpec(bits=32))
    assert 3.5 < payload_nbytes(fp32) / payload_nbytes(actors.payload()) < 4.1


def test_the_weight_error_is_the_codes_against_the_learners_weights(policy):
    payload = quantize(policy, PLAIN, _frames(16))
    error = weight_error(policy, payload, PLAIN)
    assert 0 < error < 0.02  # int8 codes over each channel's largest weight
    worse = {name: (tensor // 2 if tensor.dtype == torch.int8 else tensor) for name, tensor in payload.items()}
    assert weight_error(policy, worse, PLAIN) > 10 * error


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_bits_8_keeps_the_output_layer_fp32_and_int8_static_runs_it_in_int8(algo):
    torch.manual_seed(0)
    network = (PixelQNetwork("nature", (4, 84, 84), num_actions=4) if algo == "dqn"
               else PPO(FRAMES, pixel_trunk="nature").policy).eval()
    calibration = _frames(16)
    for spec, fp32_output in ((PLAIN, True), (ALL_INT8, False)):
        actors = QuantizedNetwork.template_for(network, spec)
        actors.load_payload(quantize(network, spec, calibration))
        last = list(actors.executable_trunk().children())[-1]
        assert (type(last) is nn.Linear) == fp32_output, spec.describe()
        if fp32_output:
            assert torch.equal(last.weight, network.trunk[-1].weight)


def test_the_flatten_reads_channels_last_activations_in_the_reordered_columns_order():
    """Nature-CNN's first linear layer reads the last convolution's channels-last output as it
    lies: without its columns reordered, the copy computes another function."""
    torch.manual_seed(0)
    policy = PPO(FRAMES, pixel_trunk="nature").policy.eval()
    calibration, frames = _frames(32), _frames(8, seed=1)
    payload = quantize(policy, PLAIN, calibration)
    with torch.no_grad():
        right = plain_conv.decode(policy.trunk, payload, fp32_ends=True)(frames)
        reordered = plain_conv.channels_last_columns
        try:
            plain_conv.channels_last_columns = lambda weight, channels: weight
            wrong = plain_conv.decode(policy.trunk, payload, fp32_ends=True)(frames)
        finally:
            plain_conv.channels_last_columns = reordered
        reference = policy.trunk(frames)
    assert (right - reference).abs().max() < 0.05 * reference.abs().max()
    assert (wrong - reference).abs().max() > 0.2 * reference.abs().max()


def test_each_actor_takes_its_own_cpus_activation_bits(policy, monkeypatch):
    """The payload carries ranges, not scales: an actor whose CPU would saturate 8-bit sums
    runs 7-bit codes, one that sums them exactly 8, from the same payload."""
    calibration, frames = _frames(32), _frames(4, seed=1)
    payload = quantize(policy, PLAIN, calibration)
    outputs = {}
    for saturates in (False, True):
        monkeypatch.setattr(onednn, "saturates_full_range", lambda answer=saturates: answer)
        actors = QuantizedNetwork.template_for(policy, PLAIN)
        actors.load_payload(payload)
        outputs[saturates] = actors(frames)
    assert not torch.equal(outputs[False], outputs[True])
    with torch.no_grad():
        reference = policy(frames)
    for logits in outputs.values():  # measured: at most 2.5% (IMPALA-CNN on 7 bits)
        assert (logits - reference).abs().max() < 0.08 * reference.abs().max()


def test_codes_max_pool_is_torchs_max_pool():
    pool = nn.MaxPool2d(3, stride=2, padding=1)
    codes = torch.randint(0, 256, (2, 16, 21, 21), dtype=torch.uint8).contiguous(memory_format=torch.channels_last)
    assert torch.equal(plain_conv.CodesMaxPool(pool)(codes), pool(codes.float()).to(torch.uint8))


def test_other_calibrations_and_modules_are_refused_in_one_line(policy):
    with pytest.raises(ConfigError, match="calibrates convolutional policies with minmax ranges"):
        quantize(policy, QuantSpec(bits=8, mode="static", engine="plain", calibration="histogram"), _frames(8))
    odd = nn.Sequential(nn.Conv2d(4, 8, 3), nn.Tanh(), nn.Flatten(), nn.Linear(8 * 82 * 82, 2))
    with pytest.raises(ConfigError, match="the trunk has Tanh"):
        plain_conv.steps_of(odd)


def test_the_copy_exports_as_one_torchscript_file_that_reads_frames(policy, tmp_path):
    from actorq.tools.standalone import export

    frames = _frames(3, seed=4)
    actors = QuantizedNetwork.from_network(policy, PLAIN, _frames(16))
    loaded = torch.jit.load(str(export(actors, tmp_path / "policy.pt", greedy=True)))
    assert torch.equal(loaded(frames), actors(frames).argmax(-1))
