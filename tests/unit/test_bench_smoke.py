"""Every benchmark entry point runs (tiny sizes) and writes its JSON table."""

import json
import subprocess
import sys

import pytest

from actorq.bench import actors, learner, learning


@pytest.mark.parametrize("module", [learner, actors])
def test_benchmark_quick_run_writes_json(module, tmp_path):
    out = tmp_path / "result.json"
    rows = module.main(["--quick", "--out", str(out)])
    document = json.loads(out.read_text())
    assert document["rows"] == json.loads(json.dumps(rows)) and len(rows) >= 2


def test_learning_benchmark_pairs_fp32_and_int8(tmp_path):
    rows = learning.main(["--quick", "--experiments", "dqn_cartpole", "--out", str(tmp_path / "l.json"),
                          "--runs-dir", str(tmp_path / "runs")])
    assert [row["actors"] for row in rows] == ["fp32", "int8 static per_channel fp32-output"]
    assert all(row["frames"] >= 1000 for row in rows)


def test_dispatcher_lists_benchmarks_and_rejects_unknown_names():
    result = subprocess.run([sys.executable, "-m", "actorq.bench", "nope"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    for name in ("learner", "inference", "actors", "replay", "learning"):
        assert name in result.stderr
