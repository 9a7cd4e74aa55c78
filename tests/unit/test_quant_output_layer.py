"""The default int8 recipe keeps the output layer in fp32 (``int8_static_fp32_output``), so the
int8 policy's greedy actions stay the fp32 policy's where Q-values are nearly tied; the
previous recipe (``quant.format=int8_static``) put the Q-values on a 256-step grid and flipped
them."""

from __future__ import annotations

import pytest
import torch

from actorq.envs import EnvSpec
from actorq.networks import QNetwork
from actorq.quant import QuantizedNetwork, QuantSpec, TrunkLayout, action_agreement, quantize, reference_module

CARTPOLE = EnvSpec(obs_dim=4, discrete=True, num_actions=2)


def nearly_tied_q_network() -> QNetwork:
    """Q-values spread over tens (as a trained CartPole DQN's), the two actions a few
    hundredths apart, either one ahead depending on the state."""
    torch.manual_seed(0)
    network = QNetwork(CARTPOLE, hidden=(64, 64)).eval()
    output = network.trunk[-1]
    with torch.no_grad():
        output.weight[0] *= 100
        output.weight[1] = output.weight[0] + 0.05 * torch.randn(64)
        output.bias.fill_(50.0)
    return network


@pytest.fixture(scope="module")
def observations() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    return torch.randn(512, CARTPOLE.obs_dim), torch.randn(2000, CARTPOLE.obs_dim)  # calibration, test


def test_default_int8_keeps_nearly_tied_greedy_actions(observations):
    calibration, test = observations
    network = nearly_tied_q_network()
    q_values = network(test)
    gap = (q_values[:, 1] - q_values[:, 0]).abs()
    assert gap.median() < 0.1 < q_values.max() - q_values.min()  # nearly tied, on a wide range
    assert 0.2 < (q_values.argmax(-1) == 1).float().mean() < 0.8  # both actions are greedy somewhere

    default = QuantizedNetwork.from_network(network, QuantSpec(bits=8, mode="static"), calibration)
    all_int8 = QuantizedNetwork.from_network(network, QuantSpec(bits=8, format="int8_static"), calibration)
    # measured: 0.99 with the output layer in fp32, 0.71 with it in int8
    assert action_agreement(network, default, test) >= 0.97
    assert action_agreement(network, all_int8, test) <= 0.8


def test_the_output_layer_travels_in_fp32_and_the_hidden_ones_in_int8(observations):
    calibration, _ = observations
    network = nearly_tied_q_network()
    spec = QuantSpec(bits=8)
    payload = quantize(network, spec, calibration)
    assert payload["l0_weight"].dtype == payload["l1_weight"].dtype == torch.int8
    assert payload["l2_weight"].dtype == torch.float32 and "l2_weight_scale" not in payload
    torch.testing.assert_close(payload["l2_weight"], network.trunk[-1].weight)
    # 2 x 64 weights at 4 bytes instead of 1, minus the output's scales and qparams
    old = quantize(network, QuantSpec(bits=8, format="int8_static"), calibration)
    nbytes = lambda p: sum(t.numel() * t.element_size() for t in p.values())  # noqa: E731
    assert nbytes(payload) - nbytes(old) == 2 * 64 * 3 - (2 * 4 + 2 * 4 + 4 + 4)
    # the actors compute exactly what torch.ao converted, then the fp32 output layer
    actors = QuantizedNetwork.from_network(network, spec, calibration)
    torch.testing.assert_close(actors(calibration), reference_module(network, spec, calibration)(calibration),
                               atol=1e-5, rtol=0)


def test_a_trunk_of_one_linear_has_no_int8_layer_left(observations):
    calibration, _ = observations
    network = QNetwork(CARTPOLE, hidden=()).eval()
    spec = QuantSpec(bits=8)
    assert set(spec.codec.payload_spec(TrunkLayout.from_trunk(network.trunk), spec)) == {"l0_weight", "l0_bias"}
    actors = QuantizedNetwork.from_network(network, spec, calibration)
    torch.testing.assert_close(actors(calibration), network(calibration))
