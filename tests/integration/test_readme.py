"""The README's Python example runs as written, with a smoke-run budget added to its overrides,
in a fresh interpreter (its actor processes import the script, as a user's would)."""

import re
import subprocess
import sys
from pathlib import Path

import torch

from tests.conftest import TINY_ON_POLICY

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_python_example_trains_acts_evaluates_and_exports(tmp_path):
    example = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    call = 'actorq.learn("ppo_cartpole", '
    assert call in example
    script = tmp_path / "example.py"
    script.write_text(example.replace(call, call + "".join(f'"{o}", ' for o in TINY_ON_POLICY)))
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    action, mean_return = result.stdout.split()[-2:]
    assert action in ("0", "1") and float(mean_return) > 0
    assert (tmp_path / "runs/ppo/summary.json").exists() and (tmp_path / "runs/ppo/checkpoints/last.ckpt").exists()
    policy = torch.export.load(str(tmp_path / "policy.pt2")).module()
    assert policy(torch.zeros(1, 4)).shape == (1,)  # the int8 copy's argmax, with torch alone
