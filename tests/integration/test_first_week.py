"""What a user does in the first week, through the real command line: a run saved with
``run_dir=`` keeps everything in that folder; resuming a finished run with a larger budget
continues it and keeps its history, and a budget it has already reached is refused without
touching the run; every callback set runs to the end; a sweep with a bad job trains nothing.
One tiny run and its two resumes serve the resume tests. An environment named by its gymnasium id
trains from the command line (``env=Acrobot-v1``) and from Python (``actorq.learn``, with an id
or an env factory of the user's script); a run from ``actorq.learn`` reports and resumes as one
from the command line, and a new run never writes into another's run dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import TINY, TINY_ON_POLICY

REPO = Path(__file__).resolve().parents[2]
QUIET = ("~callbacks.carbon", "trainer.enable_progress_bar=false", "algo.hidden=[16]")


def actorq(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *os.environ.get("PYTHONPATH", "").split(os.pathsep)])}
    return subprocess.run([sys.executable, "-m", "actorq", *overrides], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """A finished 600-frame run, its summary and checkpoint; the same run resumed to 1200
    frames; then a resume to the 1200 frames it already has."""
    cwd = tmp_path_factory.mktemp("first_week")
    run = cwd / "runs" / "a"
    first = actorq(cwd, "+experiment=dqn_cartpole", *TINY, *QUIET, "run_dir=runs/a")
    assert first.returncode == 0, first.stderr[-2000:]
    before = json.loads((run / "summary.json").read_text())
    checkpoint_before = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    extended = actorq(cwd, "+experiment=dqn_cartpole", *TINY, *QUIET, "run_dir=runs/a", "actors.total_frames=1200",
                      "ckpt_path=last")
    after = json.loads((run / "summary.json").read_text())
    files_after = {path: path.read_bytes() for path in [run / "summary.json", run / "config.yaml",
                                                     run / "checkpoints" / "last.ckpt"]}
    again = actorq(cwd, "+experiment=dqn_cartpole", *TINY, *QUIET, "run_dir=runs/a", "actors.total_frames=1200",
                   "ckpt_path=last")
    return {"cwd": cwd, "run": run, "first": first, "before": before, "checkpoint_before": checkpoint_before,
            "extended": extended, "after": after, "files_after": files_after, "again": again}


def test_a_run_dir_holds_all_of_the_run_and_nothing_is_left_elsewhere(resumed):
    assert sorted(path.name for path in resumed["cwd"].iterdir()) == ["runs"]
    assert (resumed["run"] / ".hydra" / "overrides.yaml").is_file()
    assert (resumed["run"] / "config.yaml").read_text().startswith("experiment: dqn_cartpole\n")
    assert {"config.yaml", "summary.json", "tb", "checkpoints"} <= {p.name for p in resumed["run"].iterdir()}


def test_resuming_a_finished_run_with_a_larger_budget_continues_it(resumed):
    before, after = resumed["before"], resumed["after"]
    assert resumed["extended"].returncode == 0, resumed["extended"].stderr[-3000:]
    assert before["frames"] >= 600 and after["frames"] >= 1200
    assert after["learner_steps"] > before["learner_steps"]
    assert after["eval_history"][:len(before["eval_history"])] == before["eval_history"]
    assert after["eval_history"][-1][0] == after["frames"] > before["frames"]
    assert after["wall_clock_s"] > before["wall_clock_s"]  # the time before the resume included
    frames = torch.load(resumed["run"] / "checkpoints" / "last.ckpt", weights_only=True)["actorq"]["frames"]
    assert frames == after["frames"]


def test_the_extended_run_plans_its_learning_rate_decay_over_the_new_budget(resumed):
    saved = resumed["checkpoint_before"]["lr_schedulers"][0]["lr_lambdas"][0]["updates"]
    now = torch.load(resumed["run"] / "checkpoints" / "last.ckpt", weights_only=True)
    assert now["lr_schedulers"][0]["lr_lambdas"][0]["updates"] > saved


def test_resuming_to_a_budget_already_reached_is_one_line_and_touches_nothing(resumed):
    again = resumed["again"]
    assert again.returncode == 2, again.stderr[-2000:]
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1 and "nothing is left to resume" in lines[0], again.stderr[-2000:]
    for path, content in resumed["files_after"].items():
        assert path.read_bytes() == content, path


def test_a_run_without_evaluation_ends_with_a_summary_that_says_why_it_has_no_return(tmp_path):
    result = actorq(tmp_path, *TINY, *QUIET, "~callbacks.evaluation", "run_dir=run")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["final_return"] is None
    assert "callbacks.evaluation is off" in summary["final_return_reason"]
    assert "No eval return (callbacks.evaluation is off" in result.stdout


def test_no_checkpoint_writes_no_checkpoint_of_any_kind(make_cfg, tmp_path):
    from actorq.train import train

    summary, _ = train(make_cfg(*TINY, *QUIET, "callbacks=no_checkpoint"))
    assert summary["status"] == "completed" and summary["final_return"] is not None
    assert list(tmp_path.rglob("*.ckpt")) == []


def test_a_sweep_with_a_bad_job_is_refused_before_any_job_trains(tmp_path):
    result = actorq(tmp_path, "-m", *TINY, *QUIET, "quant.bits=32,12", "hydra.sweep.dir=sweep")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("actorq: error: sweep job 1 ") and "quant.bits=12" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_with_an_unknown_key_is_one_line(tmp_path):
    result = actorq(tmp_path, "-m", "seed=0,1", "nope=1", "hydra.sweep.dir=sweep")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "nope" in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == []


SMALL_PPO = (*(override for override in TINY_ON_POLICY if not override.startswith("actors.total_frames=")), *QUIET)
"""A tiny PPO run's overrides but its frame budget."""


def test_a_gymnasium_id_trains_from_the_command_line_as_env(tmp_path):
    result = actorq(tmp_path, "train", "algo=ppo", "env=Acrobot-v1", "actors.total_frames=512", *SMALL_PPO,
                    "callbacks=no_checkpoint", "run_dir=run")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["frames"] >= 512
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["env"] == {"name": "Acrobot-v1", "library": "gymnasium", "module": None}
    saved = yaml.safe_load((tmp_path / "run" / ".hydra" / "overrides.yaml").read_text())
    assert saved[:3] == ["algo=ppo", "env=cartpole", "env.name=Acrobot-v1"]  # what actorq resume starts from


def test_a_gymnasium_id_trains_from_python_with_learn(tmp_path):
    import actorq as api

    agent = api.learn(None, *SMALL_PPO, algo="ppo", env="Acrobot-v1", total_frames=640, callbacks="no_checkpoint",
                      run_dir=str(tmp_path / "run"))
    assert (agent.config.env.name, agent.config.env.library) == ("Acrobot-v1", "gymnasium")
    assert agent.config.actors.total_frames == 640 and agent.summary["frames"] >= 640
    action, _ = agent.predict(torch.zeros(6).numpy(), deterministic=True)
    assert int(action) in (0, 1, 2)


def test_a_run_from_learn_reports_and_resumes_as_a_command_line_run_and_is_never_mixed_with_another(tmp_path):
    import actorq as api
    from actorq.report import read_run
    from actorq.util.errors import ConfigError

    run = tmp_path / "run"
    api.learn("ppo_cartpole", *SMALL_PPO, total_frames=512, run_dir=str(run))
    assert (run / "config.yaml").read_text().startswith("experiment: ppo_cartpole\n")
    assert read_run(run).experiment == "ppo_cartpole"  # what actorq report groups runs by
    files = {path: path.read_bytes() for path in sorted(run.rglob("*")) if path.is_file()}
    with pytest.raises(ConfigError, match="holds a run already"):
        api.learn("ppo_cartpole", *SMALL_PPO, total_frames=512, run_dir=str(run))
    assert {path: path.read_bytes() for path in sorted(run.rglob("*")) if path.is_file()} == files
    resumed = actorq(tmp_path, "resume", str(run), "actors.total_frames=1024")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["frames"] >= 1024


def test_an_env_factory_of_the_script_that_calls_learn_reaches_the_actor_processes(tmp_path):
    """The user's script defines the factory; the actor workers import the script to find it."""
    overrides = ", ".join(repr(override) for override in SMALL_PPO)
    (tmp_path / "script.py").write_text(f"""
import gymnasium
import actorq


def make_acrobot():
    return gymnasium.make("Acrobot-v1")


if __name__ == "__main__":
    agent = actorq.learn(None, {overrides}, algo="ppo", env=make_acrobot, total_frames=512,
                         callbacks="no_checkpoint", run_dir="run")
    print(agent.config.env.name, agent.summary["frames"])
""")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *os.environ.get("PYTHONPATH", "").split(os.pathsep)])}
    result = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    name, frames = result.stdout.split()[-2:]
    assert name == "__main__:make_acrobot" and int(frames) >= 512
