"""Exporting a quantized policy from a checkpoint: the codec a checkpoint's payload was written with,
and the observations a re-quantization calibrates on."""

from __future__ import annotations

import dataclasses
import logging
from types import SimpleNamespace

import torch

from actorq.experience import CALIBRATION_OBSERVATIONS
from actorq.envs import EnvSpec, make_env, random_observations
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
    all_int8 = dataclasses.replace(configured, format="int8_static")  # configured is static
    checkpoint = {"Experience": {"quant": dataclasses.asdict(configured),
                                 "payload": quantize(actor, all_int8, observations)}}
    network = actors_network(checkpoint, SimpleNamespace(behaviour_network=actor), env=None, bits=None)
    assert network.codec.name == "int8_static"
    expected = QuantizedNetwork.from_network(actor, all_int8, observations)
    torch.testing.assert_close(network(observations), expected(observations), atol=0, rtol=0)
    assert payload_format(configured, actor, quantize(actor, configured, observations)) == configured


PENDULUM = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
STATIC = QuantSpec(bits=8, mode="static")


def pendulum_setup() -> tuple[DeterministicActor, SimpleNamespace, torch.Tensor]:
    """An actor, the learner holding it, and states a trained Pendulum policy visits (upright,
    spinning fast): far from where random actions take the pendulum."""
    torch.manual_seed(0)
    actor = DeterministicActor(PENDULUM, (32, 32)).eval()
    visited = torch.stack([torch.ones(512), torch.zeros(512), torch.linspace(-8.0, 8.0, 512)], dim=1)
    return actor, SimpleNamespace(behaviour_network=actor), visited


def random_action_observations() -> torch.Tensor:
    torch.manual_seed(1)
    return random_observations(make_env("Pendulum-v1", seed=1), STATIC.calibration_samples)


def assert_payloads_equal(actual: dict, expected: dict) -> None:
    assert actual.keys() == expected.keys()
    assert all(torch.equal(actual[name], expected[name]) for name in expected), "payloads differ"


def test_a_re_quantization_calibrates_on_the_observations_saved_with_the_checkpoint(caplog):
    actor, learner, visited = pendulum_setup()
    checkpoint = {"Experience": {"quant": dataclasses.asdict(STATIC), CALIBRATION_OBSERVATIONS: visited}}
    with caplog.at_level(logging.WARNING, logger="actorq.export"):
        network = actors_network(checkpoint, learner, env=None, bits=8)  # no env: nothing random to draw
    assert_payloads_equal(network.payload(), quantize(actor, STATIC, visited))
    random_calibrated = quantize(actor, STATIC, random_action_observations())
    assert any(not torch.equal(network.payload()[name], random_calibrated[name]) for name in random_calibrated)
    assert not caplog.records


def test_a_checkpoint_without_saved_observations_calibrates_on_random_actions_with_a_note(caplog):
    actor, learner, _ = pendulum_setup()
    checkpoint = {"Experience": {"quant": dataclasses.asdict(STATIC)}}  # written before runs saved them
    with caplog.at_level(logging.WARNING, logger="actorq.export"):
        torch.manual_seed(1)
        network = actors_network(checkpoint, learner, make_env("Pendulum-v1", seed=1), bits=8)
    assert_payloads_equal(network.payload(), quantize(actor, STATIC, random_action_observations()))
    [note] = caplog.records
    assert "no observations from its run" in note.getMessage() and "random actions" in note.getMessage()

    caplog.clear()  # int8 dynamic (an fp32 run's export) calibrates on nothing: no note
    fp32_run = {"Experience": {"quant": dataclasses.asdict(QuantSpec(bits=32))}}
    with caplog.at_level(logging.WARNING, logger="actorq.export"):
        assert actors_network(fp32_run, learner, make_env("Pendulum-v1", seed=1), bits=None).quant.mode == "dynamic"
    assert not caplog.records


def test_a_loaded_quantized_policy_is_the_whole_version_the_actors_last_ran():
    """``actorq.load(policy="quantized")`` takes the checkpoint's head state and observation
    statistics with its payload, not the rebuilt learner's."""
    from actorq.algos.networks import GaussianPolicy
    from actorq.run.resume import EXPERIENCE_STATE
    from actorq.tools.rebuild import saved_actors_network

    spec = EnvSpec(obs_dim=3, discrete=False, action_dim=2, action_low=(-1.0, -1.0), action_high=(1.0, 1.0))
    torch.manual_seed(0)
    trained = GaussianPolicy(spec, (16, 16), log_std_init=-1.5, normalize_observations=True)
    trained.normalizer.update(5 + 3 * torch.randn(64, 3))
    quant = QuantSpec(bits=8, mode="dynamic")
    state = {"quant": dataclasses.asdict(quant), "payload": quantize(trained, quant),
             "head": trained.head.state_dict(), "normalizer": trained.normalizer.state_dict()}
    fresh = GaussianPolicy(spec, (16, 16), log_std_init=0.0, normalize_observations=True)  # as load rebuilds it
    loaded = saved_actors_network({EXPERIENCE_STATE: state}, fresh, "ckpt")
    assert torch.equal(loaded.built().head.log_std, trained.head.log_std)
    observations = 5 + 3 * torch.randn(8, 3)
    expected = QuantizedNetwork.from_network(trained, quant)
    assert torch.equal(loaded.features(observations), expected.features(observations))


def test_a_convolutional_checkpoint_naming_no_engine_exports_the_torch_ao_copy_its_actors_ran():
    """Before plain int8 tensors were the convolutional default, a checkpoint's spec named no
    engine and its payload is torch.ao's x86 copy: export and evaluate rebuild that copy (as
    resume does), not the plain one the same spec names now."""
    from actorq.algos.ppo import PPO

    frames_spec = EnvSpec(obs_dim=4 * 84 * 84, discrete=True, num_actions=4, frame_shape=(4, 84, 84))
    torch.manual_seed(0)
    policy = PPO(frames_spec, pixel_trunk="nature").policy.eval()
    frames = torch.randint(0, 256, (16, 4, 84, 84), dtype=torch.uint8)
    x86 = QuantSpec(bits=8, mode="static", engine="x86")
    configured = dataclasses.replace(x86, engine=None)
    checkpoint = {"Experience": {"quant": dataclasses.asdict(configured), "payload": quantize(policy, x86, frames)}}
    network = actors_network(checkpoint, SimpleNamespace(behaviour_network=policy), env=None, bits=None)
    assert network.quant.engine == "x86"
    expected = QuantizedNetwork.from_network(policy, x86, frames)
    torch.testing.assert_close(network(frames), expected(frames), atol=0, rtol=0)
