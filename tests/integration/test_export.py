"""A trained run's quantized policy, exported, runs in a fresh process with torch only."""

import json
import subprocess
import sys

import torch

from actorq.envs import make_env, random_observations
from actorq.export import actors_network, load_learner
from actorq.train import train
from tests.conftest import TINY

LOAD_WITHOUT_ACTORQ = """
import json, sys
sys.modules["actorq"] = None  # any import of actorq would fail
import torch
path = sys.argv[1]
policy = torch.export.load(path).module() if path.endswith(".pt2") else torch.jit.load(path)
obs = torch.tensor(json.loads(sys.argv[2]))
print(json.dumps(policy(obs).tolist()))
"""


def run_standalone(path, observations):
    result = subprocess.run(
        [sys.executable, "-c", LOAD_WITHOUT_ACTORQ, str(path), json.dumps(observations.tolist())],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return torch.tensor(json.loads(result.stdout))


def test_export_cli_writes_a_policy_plain_torch_runs(make_cfg, tmp_path):
    train(make_cfg("+experiment=td3_pendulum", *TINY, "algo.actor_hidden=[64,64]", "quant.bits=8"))
    ckpt = tmp_path / "checkpoints" / "last.ckpt"
    out = tmp_path / "policy.pt"
    result = subprocess.run([sys.executable, "-m", "actorq.export", str(ckpt), str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]

    checkpoint = torch.load(ckpt, weights_only=False)
    learner, env = load_learner(checkpoint)
    network = actors_network(checkpoint, learner, env, bits=None)
    assert network.quant.bits == 8
    observations = random_observations(make_env("Pendulum-v1", seed=1), 20)
    standalone = run_standalone(out, observations)
    with torch.no_grad():
        expected = network(observations)
        fp32 = learner.act(observations)
    assert torch.allclose(standalone, expected, atol=1e-5)
    assert (standalone - fp32).abs().max() < 0.2  # int8 is close to the learner's fp32 policy

    program = tmp_path / "policy.pt2"  # the same copy as an ExportedProgram: its codes, computed in fp32
    result = subprocess.run([sys.executable, "-m", "actorq.export", str(ckpt), str(program)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "torch.export.load" in result.stdout, result.stderr[-2000:]
    assert torch.allclose(run_standalone(program, observations), expected, atol=2e-3)


def test_export_of_a_discrete_fp32_run_is_its_greedy_fp32_policy(make_cfg, tmp_path):
    import actorq

    train(make_cfg("+experiment=dqn_cartpole", *TINY, "algo.hidden=[32,32]"))
    out = tmp_path / "policy.pt"
    result = subprocess.run(
        [sys.executable, "-m", "actorq.export", str(tmp_path / "checkpoints" / "last.ckpt"), str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    metadata = {"actorq.json": ""}
    torch.jit.load(str(out), _extra_files=metadata)
    assert json.loads(metadata["actorq.json"])["format"] == "fp32"  # the run's precision, unless --bits
    observations = random_observations(make_env("CartPole-v1", seed=1), 10)
    actions = run_standalone(out, observations)
    assert torch.equal(actions, actorq.load(tmp_path).act(observations))
    program = actorq.load(tmp_path).export(tmp_path / "policy.pt2")
    assert torch.equal(run_standalone(program, observations), actions)


def test_export_of_a_missing_checkpoint_is_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "actorq.export", str(tmp_path / "no.ckpt"), str(tmp_path / "p.pt")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "no checkpoint at" in result.stderr and "Traceback" not in result.stderr
