"""A torch without torch.ao's quantized modules (PyTorch is removing them): int8 actors still
run, every one on plain int8 tensors, named engine or not. The removal is played in a fresh
interpreter by making those modules unimportable before actorq is imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from actorq.quant import onednn

pytestmark = pytest.mark.skipif(not onednn.available(), reason="this torch build has no oneDNN int8 kernels")

WITHOUT_TORCH_AO = textwrap.dedent("""
    import sys, warnings
    import torch
    for name in ("torch.ao.nn.quantized", "torch.ao.nn.quantized.dynamic", "torch.ao.nn.intrinsic",
                 "torch.ao.nn.intrinsic.quantized", "torch.ao.nn.quantized.modules.utils",
                 "torch.ao.quantization.quantize_fx"):
        sys.modules[name] = None  # import raises ImportError
    warnings.simplefilter("error")
    from actorq.algos.networks import DeterministicActor
    from actorq.algos.ppo import PPO
    from actorq.envs import EnvSpec
    from actorq.quant import QuantSpec, QuantizedNetwork, _ao, onednn, resolve_precision

    assert not _ao.AVAILABLE and _ao.ENGINES == ()
    torch.manual_seed(0)
    spec = EnvSpec(obs_dim=17, discrete=False, action_dim=6, action_low=(-1.0,) * 6, action_high=(1.0,) * 6)
    actor, observations = DeterministicActor(spec, (64, 64, 64)).eval(), torch.randn(256, 17)
    for quant in (QuantSpec(bits=8, mode="dynamic"), QuantSpec(bits=8, mode="static"),
                  QuantSpec(bits=8, mode="dynamic", format="int8_dynamic"), QuantSpec(bits=4, mode="dynamic")):
        copy = QuantizedNetwork.from_network(actor, quant, calibration=observations)
        with torch.no_grad():
            error = (copy(observations) - actor(observations)).abs().max()
        modules = list(copy.executable_trunk().modules())
        assert not any(type(module).__module__.startswith("torch.ao") for module in modules), modules
        assert quant.bits == 4 or any(isinstance(module, (onednn.Int8Linear, onednn.DynamicInt8Linear))
                                      for module in modules), modules
        print(quant.describe(), float(error))
    chosen, _ = resolve_precision(actor, QuantSpec(bits="auto"), 16, observations)
    print("auto", chosen.describe())
    frames = EnvSpec(obs_dim=4 * 84 * 84, discrete=True, num_actions=4, frame_shape=(4, 84, 84))
    policy = PPO(frames, pixel_trunk="nature").policy.eval()
    pixels = torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8)
    copy = QuantizedNetwork.from_network(policy, QuantSpec(bits=8, mode="static"), calibration=pixels)
    assert any(isinstance(module, onednn.Int8Conv2d) for module in copy.executable_trunk().modules())
    with torch.no_grad():
        print("nature-cnn", float((copy(pixels) - policy(pixels)).abs().max() / policy(pixels).abs().max()))
""")


def test_int8_actors_run_on_plain_tensors_when_torch_has_no_torch_ao():
    result = subprocess.run([sys.executable, "-c", WITHOUT_TORCH_AO], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    errors = dict(line.rsplit(" ", 1) for line in result.stdout.splitlines() if line and not line.startswith("auto"))
    assert len(errors) == 5, result.stdout
    assert all(float(error) < 0.1 for error in errors.values()), result.stdout  # an int8 (or 4-bit) copy of it
