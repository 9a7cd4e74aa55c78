"""Exported quantized policies load and act in a fresh process that has torch but not actorq."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from actorq.envs import EnvSpec
from actorq.export import export
from actorq.algos.networks import DeterministicActor, QNetwork
from actorq.quant import QuantizedNetwork, QuantSpec

CONTINUOUS = EnvSpec(obs_dim=17, discrete=False, action_dim=6, action_low=(-2.0,) * 6, action_high=(2.0,) * 6)
DISCRETE = EnvSpec(obs_dim=8, discrete=True, num_actions=4)

# actorq is importable in this environment; forbid it so the check means something.
RUN_WITHOUT_ACTORQ = textwrap.dedent(
    """
    import sys
    sys.modules["actorq"] = None  # any 'import actorq' now raises ImportError
    import torch
    observations = torch.load(sys.argv[2])
    policy = torch.jit.load(sys.argv[1])
    torch.save({"batched": policy(observations), "single": policy(observations[0])}, sys.argv[3])
    """
)


def _run_fresh(path, observations, tmp_path) -> dict[str, torch.Tensor]:
    obs_file, out_file = tmp_path / "obs.pt", tmp_path / "out.pt"
    torch.save(observations, obs_file)
    subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT_ACTORQ, str(path), str(obs_file), str(out_file)],
        check=True, timeout=120, cwd=tmp_path,
    )
    return torch.load(out_file)


@pytest.mark.parametrize(
    "spec",
    [QuantSpec(bits=8, mode="static"), QuantSpec(bits=8, mode="dynamic"), QuantSpec(bits=16),
     QuantSpec(bits=32), QuantSpec(bits=4, mode="dynamic")],
    ids=QuantSpec.describe,
)
def test_exported_policy_matches_in_a_fresh_process(spec, tmp_path):
    torch.manual_seed(0)
    actor = DeterministicActor(CONTINUOUS, (64, 64)).eval()
    observations = torch.randn(32, CONTINUOUS.obs_dim)
    quantized = QuantizedNetwork.from_network(actor, spec, calibration=observations)
    path = export(quantized, tmp_path / "nested" / "policy.pt")
    out = _run_fresh(path, observations, tmp_path)
    torch.testing.assert_close(out["batched"], quantized(observations), atol=1e-6, rtol=0)
    assert out["single"].shape == (CONTINUOUS.action_dim,)
    extra = {"actorq.json": ""}
    torch.jit.load(str(path), _extra_files=extra)
    assert json.loads(extra["actorq.json"])["precision"] == spec.describe()


def test_exported_q_network_acts_greedily(tmp_path):
    torch.manual_seed(0)
    q_network = QNetwork(DISCRETE, (32,)).eval()
    observations = torch.randn(16, DISCRETE.obs_dim)
    quantized = QuantizedNetwork.from_network(q_network, QuantSpec(bits=8, mode="static"), calibration=observations)
    out = _run_fresh(export(quantized, tmp_path / "q.pt", greedy=True), observations, tmp_path)
    assert out["batched"].dtype == torch.int64
    torch.testing.assert_close(out["batched"], quantized(observations).argmax(-1))


@pytest.mark.parametrize("spec", [QuantSpec(bits=8, mode="dynamic"), QuantSpec(bits=8, mode="static")],
                         ids=QuantSpec.describe)
def test_exported_general_trunk_matches_in_a_fresh_process(spec, tmp_path):
    """Not an mlp(): a LayerNorm on some layers only, no activation after one Linear."""
    torch.manual_seed(0)
    policy = torch.nn.Module()
    policy.trunk = torch.nn.Sequential(
        torch.nn.Linear(17, 32), torch.nn.LayerNorm(32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
        torch.nn.Linear(32, 6), torch.nn.ReLU(),
    )
    policy.head = torch.nn.Identity()
    observations = torch.randn(32, 17)
    quantized = QuantizedNetwork.from_network(policy, spec, calibration=observations)
    path = export(quantized, tmp_path / "policy.pt")
    out = _run_fresh(path, observations, tmp_path)
    torch.testing.assert_close(out["batched"], quantized(observations), atol=1e-6, rtol=0)
    extra = {"actorq.json": ""}
    torch.jit.load(str(path), _extra_files=extra)
    metadata = json.loads(extra["actorq.json"])
    assert metadata["format"] == spec.codec.name
    assert [(layer["norm"], layer["activation"]) for layer in metadata["layers"]] == [
        (True, "relu"), (False, None), (False, "relu")
    ]
