"""Convolutional policies through the push: the codecs' payloads of a conv trunk, the actors'
copy rebuilt from them, and PPO's shared-trunk actor-critic for frames."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

from actorq.algos.conv import ImpalaCNN, PixelQNetwork
from actorq.algos.ppo import PPO
from actorq.envs import EnvSpec
from actorq.quant import QuantizedNetwork, QuantSpec, quantize
from actorq.quant import _ao
from actorq.quant.conv import first_stage, quantize_conv_policy
from actorq.quant.fidelity import action_agreement, fidelity_metrics, weight_error
from actorq.quant.quantize import payload_nbytes
from actorq.util.errors import ConfigError
from actorq.util.memory_format import set_channels_last, uses_channels_last

FRAMES = EnvSpec(obs_dim=4 * 84 * 84, discrete=True, num_actions=4, frame_shape=(4, 84, 84))
INT8 = QuantSpec(bits=8, mode="static", engine="x86")  # torch.ao's copy (the default, plain: test_plain_conv.py)


def _frames(count: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (count, 4, 84, 84), dtype=torch.uint8, generator=generator)


@pytest.fixture(scope="module", params=["nature", "impala"])
def policy(request) -> nn.Module:
    torch.manual_seed(0)
    return PPO(FRAMES, pixel_trunk=request.param).policy.eval()


def _trained(policy: nn.Module) -> nn.Module:
    """``policy`` with other weights (as after learner updates): the actors' copy was shaped
    from the old ones."""
    changed = copy.deepcopy(policy)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for parameter in changed.parameters():
            parameter.mul_(1 + 0.5 * torch.rand(parameter.shape, generator=generator))
    return changed


def test_the_int8_payload_runs_exactly_what_torch_ao_converts(policy):
    calibration, frames = _frames(16), _frames(4, seed=1)
    actors = QuantizedNetwork.template_for(policy, INT8)
    learner = _trained(policy)
    actors.load_payload(quantize(learner, INT8, calibration))
    converted = quantize_conv_policy(learner.trunk, calibration, observer=INT8.calibration, fp32_ends=True)
    assert torch.equal(actors.features(frames), converted(frames))
    copied = pickle.loads(pickle.dumps(actors))  # what a worker process receives, rebuilt there
    assert torch.equal(copied.features(frames), converted(frames))
    with torch.no_grad():  # an int8 copy at all: on noise frames, measured 1-6% (AVX2 only: 7-bit activations)
        assert (actors(frames) - learner(frames)).abs().mean() < 0.1 * learner(frames).abs().max()


def test_the_int8_payload_is_plain_tensors_a_quarter_of_fp32s_bytes(policy):
    calibration = _frames(32)
    int8, fp32 = quantize(policy, INT8, calibration[:8]), quantize(policy, QuantSpec(bits=32))
    assert all(not tensor.is_quantized for tensor in int8.values())
    assert {tensor.dtype for tensor in int8.values()} >= {torch.int8, torch.float32}
    assert 3.5 < payload_nbytes(fp32) / payload_nbytes(int8) < 4.1


def test_a_new_version_loads_into_the_actors_copy_in_place(policy):
    frames, calibration = _frames(4, seed=2), _frames(16)
    actors = QuantizedNetwork.from_network(policy, INT8, calibration)
    before = actors.features(frames).clone()
    learner = _trained(policy)
    actors.load_payload(quantize(learner, INT8, calibration))
    assert not torch.equal(actors.features(frames), before)
    assert torch.equal(actors.features(frames), quantize_conv_policy(learner.trunk, calibration, observer=INT8.calibration, fp32_ends=True)(frames))


def test_a_pushs_fidelity_converts_no_int8_model_and_its_weight_error_is_the_trunks(policy, monkeypatch):
    """The weight error reads the actors' int8 template, built once, instead of converting a
    new one at every push (about a second for IMPALA-CNN)."""
    calibration, frames = _frames(16), _frames(8, seed=1)
    actors = QuantizedNetwork.from_network(policy, INT8, calibration)
    learner = _trained(policy)
    actors.load_payload(quantize(learner, INT8, calibration))
    conversions = []
    convert = _ao.convert_static_fx
    monkeypatch.setattr(_ao, "convert_static_fx", lambda *args, **kwargs: conversions.append(1) or convert(*args, **kwargs))
    metrics = fidelity_metrics(learner, actors, frames, FRAMES, batch_size=8)
    assert conversions == []
    assert metrics["quant/weight_error"] == weight_error(learner, actors.payload(), INT8)  # a layout of its own
    assert 0 < metrics["quant/weight_error"] < 0.05


def test_converting_an_int8_copy_leaves_the_global_random_generator_as_it_was(policy):
    """The learner's draws (minibatch order) must not depend on how often the actors' copy is
    converted: torch.ao draws from the global generator while it builds modules."""
    state = torch.random.get_rng_state()
    actors = QuantizedNetwork.template_for(_trained(policy), INT8)  # its int8 template is built here
    actors.load_payload(quantize(policy, INT8, _frames(16)))
    actors(_frames(2))
    assert torch.equal(torch.random.get_rng_state(), state)


def test_formats_without_conv_kernels_are_refused_in_one_line(policy):
    for spec in (QuantSpec(bits=8, mode="dynamic"), QuantSpec(bits=16)):
        with pytest.raises(ConfigError, match="no kernels for a convolutional policy: use quant.bits=8 quant.mode=static"):
            QuantizedNetwork.template_for(policy, spec)


def test_ppo_on_frames_shares_one_trunk_between_policy_and_value_and_optimizes_it_once():
    ppo = PPO(FRAMES, pixel_trunk="nature")
    assert ppo.policy.trunk[0] is ppo.value[0]
    (optimizer,) = ppo.make_optimizers()
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    assert len(parameters) == len({id(p) for p in parameters}) == len(dict.fromkeys([*ppo.policy.parameters(),
                                                                                      *ppo.value.parameters()]))
    frames = _frames(5)
    features, value = ppo.features_and_value(frames)
    with torch.no_grad():
        assert torch.allclose(features, ppo.policy.trunk(frames)) and torch.allclose(value, ppo.value(frames).squeeze(-1))
    with pytest.raises(ConfigError, match="discrete actions"):
        PPO(EnvSpec(obs_dim=4 * 84 * 84, discrete=False, action_dim=1, action_low=(-1.0,), action_high=(1.0,),
                    frame_shape=(4, 84, 84)))
    with pytest.raises(ConfigError, match="unknown convolutional trunk 'resnet'"):
        PPO(FRAMES, pixel_trunk="resnet")


def test_a_conv_policy_exports_as_one_torchscript_file_that_reads_frames(policy, tmp_path):
    from actorq.tools.standalone import export

    calibration, frames = _frames(16), _frames(3, seed=4)
    for spec in (INT8, QuantSpec(bits=32)):
        actors = QuantizedNetwork.from_network(policy, spec, calibration)
        loaded = torch.jit.load(str(export(actors, tmp_path / f"policy{spec.bits}.pt", greedy=True)))
        expected = actors(frames).argmax(-1)
        assert torch.equal(loaded(frames), expected) and torch.equal(loaded(frames[0]), expected[0])
        assert loaded(frames.reshape(1, 3, 4, 84, 84)).shape == (1, 3)


def test_the_learners_layout_stays_out_of_the_int8_copy_and_fp32_copies_measure_their_own(policy):
    """A learner running channels-last pushes the int8 copy of the default layout (the graph
    the actors' template traced), and an fp32 copy runs the layout its own process measured
    faster (measured once there, and again in each worker a layout is pickled to)."""
    calibration, frames = _frames(16), _frames(4, seed=1)
    learner = set_channels_last(_trained(policy), True)
    converted = quantize_conv_policy(learner.trunk, calibration, observer=INT8.calibration, fp32_ends=True)
    assert "channels_last" not in converted.code and uses_channels_last(learner)
    actors = QuantizedNetwork.template_for(policy, INT8)
    actors.load_payload(quantize(learner, INT8, calibration))
    assert torch.equal(actors.features(frames), converted(frames))
    fp32 = QuantizedNetwork.template_for(policy, QuantSpec(bits=32))
    fp32.load_payload(quantize(learner, QuantSpec(bits=32)))
    with torch.no_grad():
        assert torch.allclose(fp32(frames), learner(frames), atol=1e-4)
    assert "channels_last" in fp32.layout._templates
    assert uses_channels_last(fp32.built().trunk) == fp32.layout.fp32_channels_last()
    assert "channels_last" not in pickle.loads(pickle.dumps(fp32.layout))._templates


def test_bits_8_keeps_impalas_first_stage_fp32_and_channels_last_and_int8_static_quantizes_it(policy):
    """IMPALA-CNN's first convolution and max-pool run faster in fp32 than in torch's int8
    kernels (the max-pool sees only 16 channels); ``quant.bits=8`` keeps them so, while
    ``quant.format=int8_static`` quantizes every layer. Nature-CNN has no such stage."""
    calibration, frames = _frames(16), _frames(4, seed=1)
    all_int8 = QuantSpec(bits=8, mode="static", format="int8_static", engine="x86")
    stage = first_stage(policy.trunk)
    impala = isinstance(policy.trunk[0], ImpalaCNN)
    assert [name.split(".")[-2:] for name in stage] == ([["convs", "0"], ["convs", "1"]] if impala else [])
    for spec, fp32_convs in ((INT8, 1 if impala else 0), (all_int8, 0)):
        actors = QuantizedNetwork.from_network(policy, spec, calibration)
        trunk = actors.built().trunk
        convs = [module for module in trunk.modules() if type(module) is nn.Conv2d]
        assert len(convs) == fp32_convs, spec.describe()
        # an fp32 first stage reads the frames themselves, scaled in fp32, not their int8 codes
        assert ("quantized.mul" in trunk.code) == (fp32_convs == 0)
        assert all(conv.weight.is_contiguous(memory_format=torch.channels_last) for conv in convs)
        with torch.no_grad():  # the fp32 stage hands on a quantized tensor: the copy stays close
            assert (actors(frames) - policy(frames)).abs().mean() < 0.1 * policy(frames).abs().max()


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_bits_8_keeps_the_output_layer_fp32_q_values_and_logits_alike_and_int8_static_quantizes_it(algo):
    """As an MLP's int8 copy keeps its last layer: the outputs actions are read from (DQN's
    Q-values, PPO's logits) are not put on a 256-step grid. Learner and actors build the same
    graph: the payload encoded on one side loads into the template built on the other."""
    torch.manual_seed(0)
    network = (PixelQNetwork("nature", (4, 84, 84), num_actions=4) if algo == "dqn"
               else PPO(FRAMES, pixel_trunk="nature").policy).eval()
    output = network.trunk[-1]
    calibration = _frames(16)
    for spec, fp32_output in ((INT8, True), (QuantSpec(bits=8, mode="static", format="int8_static", engine="x86"), False)):
        actors = QuantizedNetwork.template_for(network, spec)
        actors.load_payload(quantize(network, spec, calibration))
        last = actors.built().trunk.get_submodule(str(len(network.trunk) - 1))
        assert (type(last) is nn.Linear) == fp32_output, spec.describe()
        if fp32_output:
            assert torch.equal(last.weight, output.weight) and torch.equal(last.bias, output.bias)
            assert torch.equal(actors.payload()["1__weight"], output.weight)
        assert actors.built().trunk.get_submodule("0.convs.0").weight().dtype == torch.qint8  # the trunk is int8


def test_a_pushs_fidelity_of_a_q_network_on_frames_is_its_greedy_agreement_on_held_out_frames():
    """What a push logs of a DQN's int8 copy on frames, as of an MLP DQN's: the greedy
    agreement on frames it was not calibrated on (a push's run: tests/integration/test_atari.py)."""
    torch.manual_seed(0)
    network = PixelQNetwork("nature", (4, 84, 84), num_actions=4).eval()
    actors = QuantizedNetwork.from_network(network, INT8, _frames(16))
    metrics = fidelity_metrics(network, actors, _frames(8, seed=1), FRAMES, batch_size=8)
    assert metrics["quant/greedy_agreement"] == action_agreement(network, actors, _frames(8, seed=1))
    assert "quant/kl" not in metrics and 0 < metrics["quant/weight_error"] < 0.05


def test_each_actor_chooses_its_activations_bits_on_its_own_cpu_not_the_learners(policy, monkeypatch):
    """The payload carries 8-bit ranges; an actor whose CPU would saturate 8-bit sums (AVX2
    without VNNI) runs them on 7, one whose CPU sums them exactly on 8, whatever the
    learner's CPU is."""
    if _ao.DEFAULT_ENGINE not in _ao.REDUCED_RANGE_ENGINES:
        pytest.skip("the default int8 engine of this torch build keeps 8 bits on every CPU")
    calibration, frames = _frames(16), _frames(4, seed=1)
    copies = {}
    for bits in (7, 8):
        copies[bits] = quantize_conv_policy(policy.trunk, calibration, observer=INT8.calibration, full_range=bits == 8,
                                            fp32_ends=True)(frames)
    assert not torch.equal(copies[7], copies[8])
    for learner_saturates, actor_saturates in ((False, True), (True, False)):
        monkeypatch.setattr(_ao, "saturates_full_range", lambda engine, answer=learner_saturates: answer)
        payload = quantize(policy, INT8, calibration)
        monkeypatch.setattr(_ao, "saturates_full_range", lambda engine, answer=actor_saturates: answer)
        actors = QuantizedNetwork.template_for(policy, INT8)
        actors.load_payload(payload)
        assert torch.equal(actors.features(frames), copies[7 if actor_saturates else 8])


def test_the_actors_copy_runs_at_its_own_precision_inside_a_bf16_learners_autocast(policy):
    """The learner's process recomputes the actors' log-probs with its copy of their policy
    inside a training step, under a bf16-mixed learner's autocast: the copy's fp32 layers
    must run fp32 there as in the actors, or the check reads rounding the actors never had."""
    frames = _frames(4, seed=1)
    actors = QuantizedNetwork.from_network(policy, INT8, _frames(16))
    with torch.no_grad():
        expected = actors.features(frames)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.equal(actors.features(frames), expected) and torch.equal(actors(frames), actors.head(expected))
