"""``python -m benchmarks.pixels_vs_sb3``: the real Stable-Baselines3 and our real command on
Breakout, one after the other, at the smallest budget that has a steady part (two rollouts)."""

import json

import pytest

pytest.importorskip("ale_py")
pytest.importorskip("stable_baselines3")

from benchmarks import pixels_vs_sb3  # noqa: E402


def test_sb3_and_ours_train_in_turn_and_their_steady_rates_leave_the_first_rollout_out(tmp_path, capsys):
    out, runs = tmp_path / "bench.json", tmp_path / "runs"
    result = pixels_vs_sb3.main(["--quick", "--rows", "sb3", "int8", "--no-alone", "--runs-dir", str(runs),
                                 "--out", str(out)])
    sb3, int8 = result["rows"]
    assert (sb3["row"], int8["row"]) == ("sb3", "int8")
    for row in (sb3, int8):
        assert row["frames"] == 2048 and row["steady_frames"] == 1024  # the second rollout alone
        assert row["steady_fps"] > 0 and 0 < row["learn_share"] < 1
        assert 0 < row["startup_s"] < row["wall_s"]
        assert row["load_before"] >= 0 and row["load_after"] >= 0 and row["busy_before"] >= 0
    assert sb3["actors"] == "fp32 (SB3)" and sb3["overrides"] == "-"
    assert int8["actors"].startswith("int8") and int8["overrides"] == "quant.bits=8 actors.collection=lockstep"
    assert int8["vs_sb3"] == pytest.approx(int8["steady_fps"] / sb3["steady_fps"])
    summary = json.loads((runs / "int8" / "summary.json").read_text())  # the real command's run
    assert summary["frames"] == 2048 and summary["final_return"] is None  # training alone: no evaluation
    assert not (runs / "int8" / "checkpoints").exists()
    document = json.loads(out.read_text())
    assert document["rows"] == json.loads(json.dumps(result["rows"]))
    assert document["machine"]["cpu"] and document["machine"]["flags"] and document["limits"] == []
    printed = capsys.readouterr().out
    assert "CPU: " in printed and "flags: " in printed and "steady_fps" in printed


def test_a_busy_machine_is_refused_before_any_row_with_strict(tmp_path, capsys):
    runs = tmp_path / "runs"
    with pytest.raises(SystemExit) as stop:
        pixels_vs_sb3.main(["--quick", "--rows", "int8", "--strict", "--max-busy", "-1", "--runs-dir", str(runs),
                            "--out", ""])
    assert stop.value.code == 2
    assert "the machine is not quiet" in capsys.readouterr().err
    assert not runs.exists()
