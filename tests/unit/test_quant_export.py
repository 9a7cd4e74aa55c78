"""Exporting a quantized policy from a checkpoint: the codec a checkpoint's payload was written with."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import torch

from actorq.envs import EnvSpec
from actorq.export import actors_network, payload_format
from actorq.algos.networks import DeterministicActor
from actorq.quant import QuantizedNetwork, QuantSpec, quantize

CONTINUOUS = EnvSpec(obs_dim=17, discrete=False, action_dim=6, action_low=(-2.0,) * 6, action_high=(2.0,) * 6)


def test_a_checkpoint_with_the_previous_all_int8_payload_still_exports(tmp_path):
    """Checkpoints keep the spec as configured (format null); one written when bits=8 static
    meant all-int8 holds an int8_static payload, and export finds that codec."""
    torch.manual_seed(0)
    actor = DeterministicActor(CONTINUOUS, (64, 64)).eval()
    observations = torch.randn(32, CONTINUOUS.obs_dim)
    configured = QuantSpec(bits=8, mode="static")
    all_int8 = dataclasses.replace(configured, format="int8_static")
    checkpoint = {"Experience": {"quant": dataclasses.asdict(configured),
                                 "payload": quantize(actor, all_int8, observations)}}
    network = actors_network(checkpoint, SimpleNamespace(behaviour_network=actor), env=None, bits=None)
    assert network.codec.name == "int8_static"
    expected = QuantizedNetwork.from_network(actor, all_int8, observations)
    torch.testing.assert_close(network(observations), expected(observations), atol=0, rtol=0)
    assert payload_format(configured, actor, quantize(actor, configured, observations)) == configured
