"""A tiny real sweep (fp32 and int8 actors, one seed) through ``python -m actorq.report``."""

import json
import shutil
import subprocess
import sys

import pytest

from actorq.report import main
from tests.conftest import TINY
from tests.integration.test_smoke import run_cli

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("sweep")
    result = run_cli("-m", "+experiment=dqn_cartpole", *TINY, "algo.hidden=[16]", "callbacks=no_checkpoint",
                     "quant.bits=32,8", f"hydra.sweep.dir={sweep_dir}", cwd=sweep_dir)
    assert result.returncode == 0, result.stderr[-2000:]
    return sweep_dir


def table_rows(report: str) -> dict[str, list[str]]:
    """``{precision: cells}`` of the first experiment table."""
    lines = [line for line in report.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert len(cells) == len(header), line
        rows[cells[0]] = dict(zip(header, cells))
    return rows


def test_report_of_a_sweep_has_the_table_and_plots(sweep, tmp_path):
    out = tmp_path / "report"
    result = subprocess.run([sys.executable, "-m", "actorq.report", str(sweep), "--out", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    report = (out / "report.md").read_text()
    assert "## DQN on CartPole-v1 (dqn_cartpole)" in report
    rows = table_rows(report)
    assert set(rows) == {"fp32", "int8 static per_channel fp32-ends"}
    fp32, int8 = rows["fp32"], rows["int8 static per_channel fp32-ends"]
    assert fp32["seeds"] == int8["seeds"] == "1 of 1 completed"
    assert fp32["speedup vs fp32"] == "1.00x"
    assert int8["int8 policy's own return"] != "—" and fp32["int8 policy's own return"] == "—"
    summaries = {json.loads(p.read_text())["actor_precision"]: json.loads(p.read_text())
                 for p in sweep.glob("*/summary.json")}
    assert float(fp32["final return"].split(" ± ")[0]) == summaries["fp32"]["final_return"]
    if summaries["fp32"]["energy"]["kwh"] is not None:
        assert float(fp32["kWh"]) > 0 and fp32["carbon reduction vs fp32"] == "1.00x"
    assert " x " in int8["broadcast bytes (per push x pushes)"]
    pngs = sorted(out.glob("*.png"))
    assert [p.name for p in pngs] == ["dqn_on_cartpole_v1_return_vs_frames.png",
                                      "dqn_on_cartpole_v1_return_vs_time.png"]
    assert all(p.read_bytes().startswith(PNG) and p.stat().st_size > 1000 for p in pngs)
    assert all(f"]({p.name})" in report for p in pngs)
    assert "## Missing or crashed runs\n\n- none" in report
    printed = result.stdout  # the same tables, for the terminal (what `make run` ends with)
    assert table_rows(printed) == rows and "## DQN on CartPole-v1" in printed and "![" not in printed


def test_crashed_and_missing_runs_are_reported_not_averaged(sweep, tmp_path):
    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    int8_run = next(p.parent for p in copy.glob("*/summary.json")
                    if json.loads(p.read_text())["actor_precision"] != "fp32")
    (int8_run / "summary.json").unlink()  # crashed mid-run
    died = copy / "9"  # a job that died after writing only its config
    died.mkdir()
    fp32_run = next(p.parent for p in copy.glob("*/summary.json"))
    (died / "config.yaml").write_text((fp32_run / "config.yaml").read_text().replace("seed: 0", "seed: 5"))
    assert main([str(copy)]) == 0
    report = (copy / "report.md").read_text()
    rows = table_rows(report)
    assert rows["fp32"]["seeds"] == "1 of 2 completed (1 missing/crashed)"
    assert rows["int8 static per_channel fp32-ends"]["seeds"] == "0 of 1 completed (1 missing/crashed)"
    assert rows["int8 static per_channel fp32-ends"]["final return"] == "—"
    crashed = report.split("## Missing or crashed runs")[1]
    assert f"`{int8_run}`: DQN on CartPole-v1, int8 static per_channel fp32-ends, seed 0: crashed (no summary.json)" in crashed
    assert f"`{died}`: DQN on CartPole-v1, fp32, seed 5: crashed (no summary.json)" in crashed


def test_report_says_clearly_when_there_is_nothing_to_read(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no run dirs" in capsys.readouterr().err
