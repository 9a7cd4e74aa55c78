"""The README's Python example runs as written, with a smoke-run budget added to its overrides,
in a fresh interpreter (its actor processes import the script, as a user's would)."""

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import TINY

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_python_example_trains_loads_and_acts(tmp_path):
    example = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    overrides = '"run_dir=runs/dqn")'
    assert overrides in example
    script = tmp_path / "example.py"
    script.write_text(example.replace(overrides, '"run_dir=runs/dqn", ' + ", ".join(f'"{o}"' for o in TINY) + ")"))
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    final_return, action = result.stdout.split()[-2:]
    assert float(final_return) > 0 and action in ("0", "1")
    assert (tmp_path / "runs/dqn/summary.json").exists()
