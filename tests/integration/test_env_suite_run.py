"""A suite of one's own in real runs from the command line: docs/configuration.md's
``corridor_suite.py``, written into a folder outside actorq and named by ``env.module``, is
imported by the run's main process and by each of its two actor worker processes."""

import json
import os
import sys
from pathlib import Path

import pytest

import actorq
from actorq.envs import suites, unregister_suite

from tests.conftest import TINY
from tests.integration.test_smoke import run_cli
from tests.helpers import example

# Imported after corridor_suite (env.module's list is imported in order): every process that
# steps a corridor leaves a file named after its actor worker index (None: the main process).
WITNESS = '''
import os
from pathlib import Path

import corridor_suite
from actorq.actors.pool import worker_index

step = corridor_suite.Corridor.step


def witnessed_step(self, action):
    Path(os.environ["WITNESS_DIR"], f"worker-{worker_index()}").touch()
    return step(self, action)


corridor_suite.Corridor.step = witnessed_step
'''
CORRIDOR = ("env.name=corridor-5", "env.library=corridor", "actors.num_workers=2", "algo.hidden=[16]",
            "trainer.enable_progress_bar=false", *TINY)
MODULES = ("corridor_suite", "witness")


@pytest.fixture
def suite_folder(tmp_path, monkeypatch) -> Path:
    """A folder outside actorq holding the page's corridor_suite.py and the witness module, on
    this process's path too; afterwards this process's registry and modules are as they were."""
    folder = tmp_path / "suites"
    folder.mkdir()
    (folder / "corridor_suite.py").write_text(example("corridor-suite", "configuration.md"))
    (folder / "witness.py").write_text(WITNESS)
    (tmp_path / "witnessed").mkdir()
    monkeypatch.syspath_prepend(str(folder))
    assert not set(MODULES) & set(sys.modules)
    yield folder
    for name in MODULES:
        sys.modules.pop(name, None)
    if "corridor" in suites():
        unregister_suite("corridor")


def run_with(folder: Path, *overrides: str):
    run_dir = folder.parent / "run"
    path = os.pathsep.join([str(folder), *filter(None, [os.environ.get("PYTHONPATH")])])
    return run_cli(*CORRIDOR, f"run_dir={run_dir}", *overrides, cwd=folder.parent, PYTHONPATH=path,
                   WITNESS_DIR=str(folder.parent / "witnessed"), **RAY_ENV), run_dir


# Ray started by the run itself (actors.ray.address=local), its actors taking no CPU of their own.
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
BACKENDS = {"process": (), "ray": ("actors.backend=ray", "actors.ray.num_cpus=0")}


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_actor_workers_step_a_suite_named_by_env_module(suite_folder, backend):
    result, run_dir = run_with(suite_folder, "env.module=[corridor_suite,witness]", *BACKENDS[backend])
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["frames"] == 600
    assert summary["collect"]["actor_restarts"] == 0 and summary["final_return"] is not None
    witnessed = {path.name for path in (suite_folder.parent / "witnessed").iterdir()}
    assert witnessed == {"worker-0", "worker-1", "worker-None"}  # both workers and the evaluation
    agent = actorq.load(run_dir)  # imports env.module here, as the run's processes did
    assert agent.spec.obs_dim == 1 and "corridor" in suites()


def test_without_env_module_the_run_stops_in_one_line_with_exit_2(suite_folder):
    result, _ = run_with(suite_folder)
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("actorq: error: ")]
    assert len(errors) == 1 and "unknown env library 'corridor'" in errors[0] and "env.module" in errors[0]
    assert "Traceback" not in result.stderr
