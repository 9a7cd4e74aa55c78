"""A bad ``ckpt_path`` on the command line: one error line, exit status 2, nothing written."""

import os
import subprocess
import sys

from tests.conftest import TINY


def test_the_command_line_says_one_line_and_exits_2(tmp_path):
    path = tmp_path / "truncated.ckpt"
    path.write_bytes(b"PK\x03\x04 not a whole zip archive")
    result = subprocess.run([sys.executable, "-m", "actorq", "+experiment=dqn_cartpole", *TINY,
                             f"run_dir={tmp_path}", f"ckpt_path={path}"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "HYDRA_FULL_ERROR": "0"})
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("actorq: error:")]
    assert len(errors) == 1 and "not a readable checkpoint" in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "tb").exists()
