"""Every experiment runs end to end on a tiny budget; the command line reports bad input clearly."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from actorq.train import train
from tests.conftest import TINY, TINY_ON_POLICY
from tests.integration.test_configs import experiments

SMALL_NETS = {
    "dqn": ["algo.hidden=[32,32]"],
    "default": ["algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]"],
}


def small_network_overrides(cfg_algo_target):
    return SMALL_NETS["dqn"] if cfg_algo_target.endswith("DQN") else SMALL_NETS["default"]


def tiny_overrides(cfg_algo_target):
    """A smoke run's overrides: an on-policy learner (PPO) has no replay to shrink."""
    if cfg_algo_target.endswith("PPO"):
        return [*TINY_ON_POLICY, "algo.hidden=[32,32]"]
    return [*TINY, *small_network_overrides(cfg_algo_target), "replay.capacity=2000"]


RUN_ELSEWHERE = {"ppo_breakout", "dqn_breakout"}
"""Experiments whose short run has a test of its own (``tests/integration/test_atari.py``)."""


@pytest.mark.parametrize("name", [name for name in experiments() if name not in RUN_ELSEWHERE])
def test_experiment_smoke_runs(make_cfg, name, tmp_path):
    base = make_cfg(f"+experiment={name}")
    cfg = make_cfg(f"+experiment={name}", *tiny_overrides(base.algo._target_))
    summary, _ = train(cfg)
    assert summary["frames"] >= 512 and summary["learner_steps"] > 0
    assert summary["final_return"] is not None
    saved = json.loads((tmp_path / "summary.json").read_text())
    for key in ("final_return", "best_return", "frames", "learner_steps", "wall_clock_s", "frames_per_s"):
        assert key in saved
    assert (tmp_path / "config.yaml").exists()


def test_tensorboard_events_have_the_documented_metric_names(make_cfg, tmp_path):
    train(make_cfg("+experiment=dqn_cartpole", *TINY, "algo.hidden=[32,32]"))
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for tag in ("train/loss_value", "collect/frames", "collect/frames_per_s", "eval/return_mean",
                "time/collect_fraction", "train/learner_steps", "collect/dropped_frames",
                "collect/actor_restarts"):
        assert tag in tags, tag
    # A healthy run loses no frame and restarts no actor.
    assert {event.value for event in events.Scalars("collect/dropped_frames")} == {0.0}
    assert {event.value for event in events.Scalars("collect/actor_restarts")} == {0.0}
    assert all(tag.split("/")[0] in {"train", "collect", "eval", "quant", "time", "energy"} for tag in tags)
    # The x-axis is env frames.
    assert max(event.step for event in events.Scalars("collect/frames")) == 600


def run_cli(*args, cwd, **env_vars):
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", **env_vars}
    return subprocess.run([sys.executable, "-m", "actorq", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)


def test_cli_trains_and_says_where_the_logs_are(tmp_path):
    result = run_cli("+experiment=dqn_cartpole", *TINY, "algo.hidden=[16]", f"run_dir={tmp_path}",
                     "callbacks=no_checkpoint", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "TensorBoard logs:" in result.stdout and "summary.json" in result.stdout
    plan = json.loads((tmp_path / "plan.json").read_text())  # the choices the run made, both precisions
    assert plan["collection"] == "async" and plan["learner_precision"]["precision"] == "32-true"
    assert plan["actor_precision"] == "fp32"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["env.name=CartPol-v1"], "env.name=CartPol-v1: no env file or environment has this name; did you mean CartPole-v1"),
        (["algo=ddpg"], "DDPG needs continuous actions but CartPole-v1 has discrete actions"),
        (["+experiment=td3_pendulum", "algo=dqn"], "DQN needs discrete actions"),
        (["actors.num_workers=0"], "actors.num_workers must be positive"),
        (["actors.backend=rays"], "actors.backend must be process or ray, got 'rays'"),
        (["actors.collection=sync"], "actors.collection must be auto, async, lockstep, got 'sync'"),
        (["algo.batch_size=-1"], "batch_size must be positive"),
        (["replay.capacity=0"], "capacity must be positive"),
        (["algo.nope=1"], "Could not override 'algo.nope': no such key (--cfg job prints the config's keys)"),
        (["replay.capasity=10"], "Could not override 'replay.capasity': no such key; did you mean replay.capacity?"),
        (["env=nope"], "env=nope: no env file or environment has this name"),
        (["env.library=gymnasium", "env.name=PongNoFrameskip-v4"], "set env.library=atari, or say env=PongNoFrameskip-v4 alone"),
        (["--algo", "ppo", "-n", "100"], "-n: actorq train takes KEY=VALUE, not this flag: say actors.total_frames=100"),
        (["quant.bits=[8"], "no viable alternative at input '[8'"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, overrides, message):
    result = run_cli(*overrides, f"run_dir={tmp_path}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("actorq: error: ")]
    assert len(error_lines) == 1 and message in error_lines[0]
    assert "Traceback" not in result.stderr


def unwritable_dir(tmp_path, why: str) -> tuple[Path, str]:
    """A dir the run cannot create or write to, and the reason the error line gives."""
    if why == "under a file":
        (tmp_path / "a_file").touch()
        return tmp_path / "a_file" / "run", "Not a directory"
    read_only = tmp_path / "read_only"
    read_only.mkdir(mode=0o555)
    if os.access(read_only, os.W_OK):
        pytest.skip("this user writes to read-only dirs (root)")
    return read_only / "run", "Permission denied"


@pytest.mark.parametrize(("key", "why"), [("run_dir", "under a file"), ("run_dir", "read-only"),
                                          ("hydra.run.dir", "under a file"), ("hydra.sweep.dir", "under a file")])
def test_an_output_dir_that_cannot_be_written_is_one_line_and_exit_2(tmp_path, key, why):
    """Hydra creates its output dir before any of actorq runs: the command checks it first."""
    path, reason = unwritable_dir(tmp_path, why)
    sweep = ["-m", "seed=0,1"] if key == "hydra.sweep.dir" else []
    result = run_cli(*sweep, *TINY, "algo.hidden=[16]", "callbacks=no_checkpoint", f"{key}={path}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines() == [f"actorq: error: {key} {path} is not writable: {reason}"]


def test_the_ray_backend_without_ray_says_how_to_install_it(tmp_path):
    no_ray = tmp_path / "no_ray"  # as if Ray were not installed: find_spec finds none, import fails
    no_ray.mkdir()
    (no_ray / "sitecustomize.py").write_text("import sys\nsys.modules['ray'] = None\n")
    result = run_cli(*TINY, "actors.backend=ray", "callbacks=no_checkpoint", f"run_dir={tmp_path}", cwd=tmp_path,
                     PYTHONPATH=str(no_ray))
    assert result.returncode == 2, result.stderr[-2000:]
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("actorq: error: ")]
    assert error_lines == ["actorq: error: actors.backend=ray needs Ray: pip install 'actorq[ray]'"]
    assert "Traceback" not in result.stderr


def test_unknown_algorithm_lists_the_choices(tmp_path):
    result = run_cli("algo=a3c", f"run_dir={tmp_path}", cwd=tmp_path)
    assert result.returncode == 2
    assert "algo/a3c" in result.stderr and "dqn" in result.stderr and "ppo" in result.stderr
    assert "Traceback" not in result.stderr


def test_multirun_sweep_writes_one_run_dir_per_combination(tmp_path):
    result = run_cli("-m", "+experiment=dqn_cartpole", *TINY, "algo.hidden=[16]", "callbacks=no_checkpoint",
                     "quant.bits=32,8", f"hydra.sweep.dir={tmp_path}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    summaries = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*/summary.json"))]
    assert [s["actor_precision"] for s in summaries] == ["fp32", "int8 dynamic per_channel fp32-ends"]


def test_a_run_that_blows_up_stops_in_one_line_with_a_failed_summary(tmp_path):
    result = run_cli(*TINY, "algo.hidden=[16]", "algo.lr=1e20", "callbacks=no_checkpoint", f"run_dir={tmp_path}",
                     cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("actorq: error: ")]
    assert len(errors) == 1 and "non-finite loss" in errors[0] and "at learner step" in errors[0]
    assert "Traceback" not in result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("NonFiniteError: non-finite loss")
