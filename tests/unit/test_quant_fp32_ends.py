"""The default int8 recipe (``int8_static_fp32_ends``) keeps the first and the last ``Linear``
in fp32: the int8 policy's greedy actions stay the fp32 policy's where Q-values are nearly
tied, and its actions follow a narrow observation feature beside a wide one. The previous
recipe (``quant.format=int8_static``, every layer int8) loses both."""

from __future__ import annotations

import pytest
import torch

from actorq.envs import EnvSpec
from actorq.algos.networks import DeterministicActor, QNetwork
from actorq.quant import QuantizedNetwork, QuantSpec, TrunkLayout, action_agreement, quantize, reference_module

CARTPOLE = EnvSpec(obs_dim=4, discrete=True, num_actions=2)
DEFAULT, ALL_INT8 = QuantSpec(bits=8, mode="static"), QuantSpec(bits=8, mode="static", format="int8_static")


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


def test_greedy_actions_of_nearly_tied_q_values_stay_the_fp32_ones():
    torch.manual_seed(1)
    calibration, test = torch.randn(512, CARTPOLE.obs_dim), torch.randn(2000, CARTPOLE.obs_dim)
    network = nearly_tied_q_network()
    q_values = network(test)
    assert (q_values[:, 1] - q_values[:, 0]).abs().median() < 0.1 < q_values.max() - q_values.min()
    assert 0.2 < (q_values.argmax(-1) == 1).float().mean() < 0.8  # both actions are greedy somewhere
    default = QuantizedNetwork.from_network(network, DEFAULT, calibration)
    all_int8 = QuantizedNetwork.from_network(network, ALL_INT8, calibration)
    # measured: 0.99 with the last layer in fp32, 0.71 with it in int8
    assert action_agreement(network, default, test) >= 0.97
    assert action_agreement(network, all_int8, test) <= 0.8


def test_actions_follow_a_narrow_feature_beside_a_wide_one():
    """A pole angle of +-0.2 beside an angular velocity of +-13: with one int8 range for the
    whole observation the angle gets two or three levels, and the action near the balanced
    state barely follows it."""
    spec = EnvSpec(obs_dim=2, discrete=False, action_dim=1, action_low=(-1.0,), action_high=(1.0,))
    torch.manual_seed(0)
    actor = DeterministicActor(spec, hidden=(64, 64)).eval()
    with torch.no_grad():
        actor.trunk[0].weight[:, 0] *= 10  # the angle: narrow, and what the action follows
        actor.trunk[0].weight[:, 1] *= 0.05  # the velocity: wide, barely used
    calibration = torch.stack([torch.empty(512).uniform_(-0.2, 0.2), torch.empty(512).uniform_(-13, 13)], 1)
    near_balance = torch.stack([torch.linspace(-0.05, 0.05, 201), torch.zeros(201)], 1)
    actions = actor(near_balance)

    def relative_error(quant: QuantSpec) -> float:
        quantized = QuantizedNetwork.from_network(actor, quant, calibration)
        return ((quantized(near_balance) - actions).abs().mean() / actions.std()).item()

    assert relative_error(DEFAULT) <= 0.2  # measured 0.08
    assert relative_error(ALL_INT8) >= 0.5  # measured 0.85


def test_the_ends_travel_in_fp32_and_the_layers_between_in_int8():
    torch.manual_seed(1)
    calibration = torch.randn(512, CARTPOLE.obs_dim)
    network = nearly_tied_q_network()
    payload = quantize(network, DEFAULT, calibration)
    assert payload["l0_weight"].dtype == payload["l2_weight"].dtype == torch.float32
    assert payload["l1_weight"].dtype == torch.int8 and "l1_weight_scale" in payload
    assert "l0_weight_scale" not in payload and "l2_weight_scale" not in payload
    torch.testing.assert_close(payload["l0_weight"], network.trunk[0].weight)
    torch.testing.assert_close(payload["l2_weight"], network.trunk[-1].weight)
    assert set(payload) == set(DEFAULT.codec.payload_spec(TrunkLayout.from_trunk(network.trunk), DEFAULT))
    # the actors compute exactly what torch.ao converted, between the fp32 ends
    actors = QuantizedNetwork.from_network(network, DEFAULT, calibration)
    reference = reference_module(network, DEFAULT, calibration)
    torch.testing.assert_close(actors(calibration), reference(calibration), atol=1e-5, rtol=0)


@pytest.mark.parametrize("hidden", [(), (32,)])
def test_a_trunk_with_nothing_between_its_ends_runs_in_fp32(hidden):
    torch.manual_seed(0)
    calibration = torch.randn(64, CARTPOLE.obs_dim)
    network = QNetwork(CARTPOLE, hidden=hidden).eval()
    payload = quantize(network, DEFAULT, calibration)
    assert all(tensor.dtype == torch.float32 for tensor in payload.values())
    actors = QuantizedNetwork.from_network(network, DEFAULT, calibration)
    torch.testing.assert_close(actors(calibration), network(calibration))
