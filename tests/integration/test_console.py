"""What ``actorq train`` prints: its help, and a run's console (each line once, no
instantiation log, a progress bar in frames, one line per evaluation); a run with no
experiment file, resumed from its run dir."""

import json
import re

import pytest

from tests.conftest import TINY, TINY_ON_POLICY
from tests.integration.test_smoke import run_cli


def test_train_help_is_actorqs_own(tmp_path):
    result = run_cli("train", "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert out.startswith("actorq: train an RL agent")
    assert "powered by Hydra" not in out and "_target_" not in out  # no config dump
    assert "Usage:" in out and "+experiment=td3_pendulum_wide" not in out  # names, not overrides
    assert "td3_pendulum_wide" in out and "callbacks  default* | no_checkpoint;" in out
    assert len(out.splitlines()) < 70


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console")
    result = run_cli("+experiment=dqn_cartpole", *TINY, "algo.hidden=[16]", "callbacks=no_checkpoint",
                     "quant.bits=8", f"run_dir={tmp / 'run'}", cwd=tmp)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.replace("\r", "\n"), result.stderr


def test_a_run_prints_each_line_once_and_no_instantiation(console):
    out, err = console
    both = out + err
    assert "Instantiating" not in both
    assert both.count("GPU available") == 1  # Lightning's INFO lines: once, through the run's logging
    assert "`Trainer.fit` stopped" in out and both.count("`Trainer.fit` stopped") == 1


def test_a_run_shows_frames_and_each_evaluation(console):
    out, _ = console
    # TINY: 600 frames, an evaluation every 300 frames.
    evals = re.findall(r"\[INFO\] eval @ (\d+) frames: return -?[\d.]+ ± [\d.]+ \(int8: -?[\d.]+\)", out)
    assert evals == ["300", "600"]
    bars = [line for line in out.splitlines() if line.startswith("Training:")]
    assert any(re.search(r"\| 600/600 frames \[.*frames/s=\d+, return=-?[\d.]+ \(int8 -?[\d.]+\)\]", bar)
               for bar in bars), bars[-3:]
    assert not any(re.search(r"\d+/\d+ \[", bar) for bar in bars)  # never a count of batches


def test_a_run_with_no_experiment_file_resumes_from_its_run_dir_to_a_larger_budget(tmp_path):
    run_dir = tmp_path / "ppo half cheetah"  # a space: the run dir goes back to Hydra quoted
    # a periodic checkpoint at the last batch: the final save finds it written and skips, so
    # last.ckpt holds an epoch whose last batch was processed but not yet counted as finished
    started = run_cli("train", "algo=ppo", "env=half_cheetah", *TINY_ON_POLICY, "algo.hidden=[16]",
                      "checkpoint.every_frames=256", f"run_dir={run_dir}", "trainer.enable_progress_bar=false",
                      cwd=tmp_path)
    assert started.returncode == 0, started.stderr[-2000:]
    assert f"actorq resume {run_dir} actors.total_frames=N" in started.stdout
    first = json.loads((run_dir / "summary.json").read_text())
    resumed = run_cli("resume", str(run_dir), "actors.total_frames=1024", "trainer.enable_progress_bar=true",
                      cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "actorq resume: actorq train algo=ppo env=half_cheetah" in resumed.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (first["frames"], summary["frames"]) == (512, 1024)
    assert summary["learner_steps"] > first["learner_steps"]
    # Lightning skips on_train_epoch_start in a run resumed mid-epoch: the bar still counts frames
    bars = [line for line in resumed.stdout.replace("\r", "\n").splitlines() if line.startswith("Training:")]
    assert any("| 512/1024 frames [" in bar for bar in bars) and "| 1024/1024 frames [" in bars[-1], bars
    assert not any(re.search(r"\d+/\d+ \[", bar) for bar in bars)  # never a count of batches

