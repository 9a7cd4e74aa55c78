"""A policy written as an ExportedProgram (``.pt2``): the int8 copy as its int8 codes, computed
with plain operations (:mod:`actorq.quant.reference`), giving what the actors' copy gives."""

from __future__ import annotations

import json

import pytest
import torch

from actorq.algos.networks import DeterministicActor
from actorq.algos.ppo import PPO
from actorq.envs import EnvSpec
from actorq.quant import QuantizedNetwork, QuantSpec, onednn
from actorq.quant.reference import reference_trunk
from actorq.tools.standalone import export
from actorq.util.errors import ConfigError

CONTINUOUS = EnvSpec(obs_dim=17, discrete=False, action_dim=6, action_low=(-1.0,) * 6, action_high=(1.0,) * 6)
FRAMES = EnvSpec(obs_dim=4 * 84 * 84, discrete=True, num_actions=4, frame_shape=(4, 84, 84))
ONEDNN_LAYERS = (onednn.Int8Linear, onednn.DynamicInt8Linear, onednn.Int8Conv2d)


def _frames(count: int) -> torch.Tensor:
    return torch.randint(0, 256, (count, 4, 84, 84), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def _load(path, observations: torch.Tensor) -> tuple[torch.Tensor, dict, torch.export.ExportedProgram]:
    files = {"actorq.json": ""}
    program = torch.export.load(str(path), extra_files=files)
    return program.module()(observations), json.loads(files["actorq.json"]), program


def _int8_constants(program: torch.export.ExportedProgram) -> int:
    tensors = [*program.state_dict.values(), *program.constants.values()]
    return sum(tensor.numel() for tensor in tensors if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.int8)


@pytest.mark.parametrize("quant", [
    QuantSpec(bits=8, mode="dynamic"), QuantSpec(bits=8, mode="static"),
    QuantSpec(bits=8, mode="dynamic", engine="plain"), QuantSpec(bits=8, mode="static", engine="plain"),
], ids=["dynamic", "static", "dynamic-plain", "static-plain"])
def test_an_mlp_int8_copy_exports_as_int8_codes_computing_what_the_actors_compute(quant, tmp_path):
    torch.manual_seed(0)
    actor = DeterministicActor(CONTINUOUS, (256, 256)).eval()
    network = QuantizedNetwork.from_network(actor, quant, calibration=torch.randn(512, CONTINUOUS.obs_dim))
    runs_onednn = any(isinstance(module, ONEDNN_LAYERS) for module in network.executable_trunk().modules())
    assert runs_onednn == (quant.engine == "plain")  # the torch.ao copies take the decode-on-plain path
    observations = torch.randn(64, CONTINUOUS.obs_dim)
    actions, metadata, program = _load(export(network, tmp_path / "policy.pt2"), observations)
    # the same codes but where a sum falls on a rounding boundary: one code apart there
    torch.testing.assert_close(actions, network(observations), atol=2e-3, rtol=0)
    assert metadata["precision"] == quant.describe()
    assert _int8_constants(program) == 256 * 256  # the middle layer's codes (fp32 ends), as int8
    assert program.module()(observations[:1]).shape == (1, CONTINUOUS.action_dim)  # any batch size


def test_an_fp32_policy_exports_unchanged(tmp_path):
    torch.manual_seed(0)
    actor = DeterministicActor(CONTINUOUS, (64, 64)).eval()
    network = QuantizedNetwork.from_network(actor, QuantSpec(bits=32))
    observations = torch.randn(8, CONTINUOUS.obs_dim)
    actions, metadata, _ = _load(export(network, tmp_path / "policy.pt2"), observations)
    torch.testing.assert_close(actions, actor(observations), atol=0, rtol=0)
    assert metadata["format"] == "fp32"


def test_a_convolutional_int8_copy_exports_and_acts_as_the_actors_do(tmp_path):
    torch.manual_seed(0)
    policy = PPO(FRAMES, pixel_trunk="nature").policy.eval()
    frames = _frames(16)
    network = QuantizedNetwork.from_network(policy, QuantSpec(bits=8, mode="static"), calibration=frames)
    logits, metadata, program = _load(export(network, tmp_path / "policy.pt2"), frames)
    expected = network(frames)
    assert (logits - expected).abs().max() < 1e-2 * expected.abs().max()
    assert _int8_constants(program) > 0 and metadata["input_dtype"] == "uint8"
    greedy, _, _ = _load(export(network, tmp_path / "greedy.pt2", greedy=True), frames)
    assert torch.equal(greedy, expected.argmax(dim=-1))


def test_a_torch_ao_convolutional_copy_is_refused_in_one_line(tmp_path):
    torch.manual_seed(0)
    policy = PPO(FRAMES, pixel_trunk="nature").policy.eval()
    network = QuantizedNetwork.from_network(policy, QuantSpec(bits=8, mode="static", engine="x86"),
                                            calibration=_frames(8))
    with pytest.raises(ConfigError, match="write TorchScript"):
        export(network, tmp_path / "policy.pt2")


def _codes_apart(actual: torch.Tensor, expected: torch.Tensor) -> tuple[int, float]:
    """The largest difference between two code tensors, and the fraction of codes that differ."""
    difference = (actual.int() - expected.int()).abs()
    return int(difference.max()), float((difference > 0).float().mean())


def test_each_reference_layer_gives_the_kernels_codes_but_on_rounding_boundaries():
    torch.manual_seed(0)
    policy = PPO(FRAMES, pixel_trunk="impala").policy.eval()
    frames = _frames(8)
    trunk = QuantizedNetwork.from_network(policy, QuantSpec(bits=8, mode="static"), calibration=frames).executable_trunk()
    twins = reference_trunk(trunk)
    kinds = set()
    x = frames
    for layer, twin in zip(trunk, twins):
        expected = layer(x)
        largest, fraction = _codes_apart(twin(x), expected)
        assert largest <= 1 and fraction < 1e-3, f"{type(layer).__name__}: {largest} codes apart in {fraction:.2%}"
        kinds.add(type(layer).__name__)
        x = expected
    assert {"Int8Conv2d", "Int8Residual", "Int8Linear"} <= kinds  # the residual sum's twin ran too


def test_a_dynamic_reference_layer_quantizes_each_batch_on_its_own_range():
    torch.manual_seed(0)
    codes, scale = torch.randint(-127, 128, (32, 64), dtype=torch.int8), torch.rand(32) * 0.01
    layer = onednn.DynamicInt8Linear(codes, scale, None, torch.randn(32), relu=True)
    twin = reference_trunk(torch.nn.Sequential(layer))
    for x in (torch.randn(4, 64), 100 * torch.rand(4, 64)):  # ranges with and without negatives
        torch.testing.assert_close(twin(x), layer(x), atol=1e-4 * float(x.abs().max()), rtol=1e-4)


def test_a_linear_reference_layer_with_fp32_out_keeps_its_relu():
    torch.manual_seed(0)
    codes, scale = torch.randint(-127, 128, (32, 64), dtype=torch.int8), torch.rand(32) * 0.01
    layer = onednn.Int8Linear(codes, scale, torch.randn(32), in_qparams=(0.05, 128), out_qparams=None, relu=True)
    x = torch.randint(0, 256, (4, 64), dtype=torch.uint8)
    torch.testing.assert_close(reference_trunk(torch.nn.Sequential(layer))(x), layer(x), atol=1e-4, rtol=1e-4)


def test_the_export_benchmark_times_both_formats_at_both_precisions(tmp_path):
    from actorq.bench.export import main

    rows = main(["--quick", "--out", str(tmp_path / "export.json")])
    assert [row["precision"] for row in rows] == ["fp32", "int8 dynamic"]
    assert all(row["pt2_us"] > 0 and row["TorchScript_us"] > 0 for row in rows)
    assert rows[1]["pt2_MB"] < rows[0]["pt2_MB"]  # the int8 file holds int8 codes
    assert json.loads((tmp_path / "export.json").read_text())["rows"] == rows
