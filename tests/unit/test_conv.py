"""Pixel policies: the Atari env's uint8 frames, the convolutional trunks, and their static int8
copies (conv+ReLU fused, per-channel weights, int8 residual adds) measured on real frames."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.ao.nn import intrinsic, quantized

from actorq.algos.conv import ImpalaCNN, NatureCNN, PixelPolicy
from actorq.envs.atari import make_atari
from actorq.quant.conv import quantize_conv_policy, serialized_bytes
from actorq.util.errors import ConfigError


@pytest.fixture(scope="module")
def breakout_frames() -> torch.Tensor:
    """256 frames of Breakout under random actions, ``[256, 4, 84, 84]`` uint8."""
    env = make_atari("breakout", num_envs=8, seed=0)
    frames, _ = env.reset(seed=0)
    seen = [frames]
    rng = np.random.default_rng(0)
    for _ in range(31):
        frames, *_ = env.step(rng.integers(0, env.single_action_space.n, size=8))
        seen.append(frames)
    env.close()
    return torch.from_numpy(np.concatenate(seen))


def test_atari_frames_are_stacked_uint8(breakout_frames):
    assert breakout_frames.dtype == torch.uint8 and breakout_frames.shape == (256, 4, 84, 84)
    assert int(breakout_frames.max()) > 0 and len(breakout_frames.unique()) > 2  # a picture, not a blank
    with pytest.raises(ConfigError, match="unknown Atari game 'breakuot'"):
        make_atari("breakuot", num_envs=1)


def test_the_trunks_take_uint8_frames_and_scale_them_inside():
    """Once, by 1/255: a trunk's output is its layers' on pixels in [0, 1], whichever dtype
    the frames come in (a missing or doubled scaling fails)."""
    frames = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    for trunk in (NatureCNN(4), ImpalaCNN(4)):
        with torch.no_grad():
            expected = trunk.linear(trunk.convs(frames.float() / 255))
            assert torch.allclose(trunk(frames), expected, rtol=1e-5, atol=1e-6)
            assert torch.allclose(trunk(frames.float()), expected, rtol=1e-5, atol=1e-6)
        assert trunk(frames).shape == (3, trunk.features)
    with pytest.raises(ValueError, match="unknown convolutional trunk 'resnet'"):
        PixelPolicy("resnet", 4, num_actions=4)


@pytest.mark.parametrize("trunk", ["nature", "impala"])
def test_the_int8_copy_fuses_conv_relu_quantizes_per_channel_and_stays_close_on_real_frames(trunk, breakout_frames):
    torch.manual_seed(0)
    policy = PixelPolicy(trunk, 4, num_actions=4).eval()
    calibration, held_out = breakout_frames[:192], breakout_frames[192:]
    int8 = quantize_conv_policy(policy, calibration)
    modules = list(int8.modules())
    convs = [m for m in modules if isinstance(m, (quantized.Conv2d, intrinsic.quantized.ConvReLU2d))]
    assert convs and all(m.weight().qscheme() == torch.per_channel_affine for m in convs)
    if trunk == "nature":  # every convolution is followed by a ReLU: all fused
        assert all(isinstance(m, intrinsic.quantized.ConvReLU2d) for m in convs)
    else:  # the residual adds run on int8 tensors
        assert "quantized.add" in str(int8.graph) or "add_relu" in str(int8.graph)
    with torch.no_grad():
        fp32_logits, int8_logits = policy(held_out), int8(held_out)
    spread = float(fp32_logits.max() - fp32_logits.min())
    assert float((int8_logits - fp32_logits).abs().max()) < 0.05 * spread  # measured: 0.6% (nature), 2% (impala)
    assert serialized_bytes(int8) < serialized_bytes(policy) / 3  # the push moves int8 weights
    assert torch.equal(policy(held_out), fp32_logits)  # the policy itself is left as it was
    with pytest.raises(ValueError, match="needs calibration frames"):
        quantize_conv_policy(policy, breakout_frames[:0])


def test_activations_get_8_bits_where_this_cpus_kernels_sum_them_exactly(breakout_frames):
    """torch.ao's x86 recipe keeps activations to 7 bits; where the kernels do not saturate
    (AVX-512 VNNI), 8 bits are exact and halve the error, and that is what the copy uses."""
    if "x86" not in torch.backends.quantized.supported_engines:
        pytest.skip("no x86 int8 engine in this torch build")
    from actorq.quant._ao import saturates_full_range

    torch.manual_seed(0)
    policy = PixelPolicy("impala", 4, num_actions=4).eval()
    calibration, held_out = breakout_frames[:192], breakout_frames[192:]
    with torch.no_grad():
        reference = policy(held_out)
        outputs = {bits: quantize_conv_policy(policy, calibration, "x86", full_range=bits == 8)(held_out)
                   for bits in (7, 8)}
        chosen = quantize_conv_policy(policy, calibration, "x86")(held_out)
    exact = not saturates_full_range("x86")
    assert torch.equal(chosen, outputs[8 if exact else 7])
    if exact:
        error = {bits: float((out - reference).abs().mean()) for bits, out in outputs.items()}
        assert error[8] < 0.75 * error[7], error
