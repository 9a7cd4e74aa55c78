"""A new precision format through everything a user does with a run: one tiny real DQN run
with ``quant.format=int4_packed`` (PolicyPush pushing packed 4-bit weights to two
worker processes), then export, ``actorq.evaluate policy=quantized`` and ``actorq.report``
on it. The run is shared by every test here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module

from actorq import evaluate, export, report
from actorq.envs import make_env, random_observations
from actorq.export import actors_network, load_learner
from actorq.train import train
from tests.conftest import TINY
from tests.helpers import scalars
from tests.integration.test_evaluate import RETURN_LINE, run_main

INT4 = "int4 packed per_channel"


@pytest.fixture(scope="module")
def int4_run(tmp_path_factory) -> tuple[Path, dict]:
    run_dir = tmp_path_factory.mktemp("sweep") / "int4"
    overrides = ["+experiment=dqn_cartpole", "quant.bits=4", "quant.format=int4_packed", "algo.hidden=[64,64]",
                 "actors.num_workers=2", *TINY, "~callbacks.carbon", "trainer.enable_progress_bar=false",
                 f"run_dir={run_dir}"]
    with initialize_config_module("actorq.conf", version_base="1.3"):
        summary, _ = train(compose("config", overrides=overrides))
    return run_dir, summary


def test_the_workers_ran_int4_payloads_and_the_broadcasts_logged_their_fidelity(int4_run):
    run_dir, summary = int4_run
    assert summary["status"] == "completed" and summary["frames"] >= 600
    assert summary["actor_precision"] == INT4
    assert summary["final_return_quant"] is not None  # the int4 policy was evaluated beside fp32
    logged = scalars(run_dir / "tb")
    assert logged["quant/pushes"][-1][1] >= 2
    assert all(0 < error < 0.2 for _, error in logged["quant/weight_error"])
    assert all(0 <= agreement <= 1 for _, agreement in logged["quant/greedy_agreement"])
    assert all(ratio < 0.25 for _, ratio in logged["quant/compression"])  # 4-bit codes and fp32 scales, biases


def test_export_writes_the_int4_policy_the_actors_last_ran(int4_run, capsys, tmp_path):
    run_dir, _ = int4_run
    checkpoint_path, out = run_dir / "checkpoints" / "last.ckpt", tmp_path / "policy.pt"
    code, _, err = run_main(capsys, export, checkpoint_path, out)
    assert code == 0, err
    checkpoint = torch.load(checkpoint_path, weights_only=False)
    network = actors_network(checkpoint, *load_learner(checkpoint), bits=None)
    assert network.codec.name == "int4_packed" and network.payload()["l0_weight"].dtype == torch.uint8
    observations = random_observations(make_env("CartPole-v1", seed=1), 20)
    policy = torch.jit.load(str(out))
    assert torch.equal(policy(observations), network(observations).argmax(dim=-1))


def test_evaluate_and_report_name_the_int4_precision(int4_run, capsys):
    run_dir, summary = int4_run
    code, out, err = run_main(capsys, evaluate, run_dir, "episodes=1", "policy=quantized")
    assert code == 0, err
    assert f"CartPole-v1, quantized policy ({INT4}" in out and RETURN_LINE.search(out.strip())

    code, _, err = run_main(capsys, report, run_dir.parent)
    assert code == 0, err
    lines = (run_dir.parent / "report.md").read_text().splitlines()
    row = next(line for line in lines if line.startswith(f"| {INT4} |"))
    assert f"{summary['final_return_quant']:.1f}" in row  # the int4 policy's own return
    assert json.loads((run_dir / "summary.json").read_text())["actor_precision"] == INT4
