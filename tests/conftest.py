"""Shared fixtures: composing the real Hydra config the way the command line does."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import DictConfig

from actorq.run.learner_precision import CACHE_DIR_ENV


def pytest_configure(config):
    """Measurements actorq caches (``trainer.precision=auto``'s timings) go to a folder of this
    test session, inherited by the runs it starts: the user's cache is never read or written."""
    os.environ[CACHE_DIR_ENV] = tempfile.mkdtemp(prefix="actorq-test-cache-")


def pytest_unconfigure(config):
    """The session's cache folder goes with the session."""
    cache_dir = os.environ.pop(CACHE_DIR_ENV, None)
    if cache_dir:
        shutil.rmtree(cache_dir, ignore_errors=True)


# The longest files first (durations of a two-worker `make test`), so that the test workers,
# which take whole files in this order (`--dist loadfile --no-loadscope-reorder`), never end
# with one of them running a long file alone. Ray's two-node tests come first on their worker:
# an in-process Ray session of the scale-out benchmark's test before them broke their kill.
LONGEST_FIRST = (
    "tests/component/test_ray_actors.py",
    "tests/integration/test_soak.py",
    "tests/integration/test_bench_smoke.py",
    "tests/integration/test_learning.py",
    "tests/integration/test_learning_d4pg_sac.py",
    "tests/integration/test_learning_prioritized.py",
    "tests/integration/test_algo_quant_matrix.py",
    "tests/integration/test_bad_config_fuzz.py",
    "tests/integration/test_ppo.py",
    "tests/integration/test_first_week.py",
    "tests/integration/test_resume.py",
    "tests/integration/test_parallel_learners.py",
    "tests/component/test_actor_faults.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest as collected


def pytest_sessionfinish(session, exitstatus):
    """A run that collected no test is a failure (exit 1), never a silent pass."""
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def make_cfg(tmp_path: Path) -> Callable[..., DictConfig]:
    """``make_cfg("+experiment=dqn_cartpole", "seed=1")`` -> a composed config in tmp_path."""

    def _make(*overrides: str) -> DictConfig:
        with initialize_config_module("actorq.conf", version_base="1.3"):
            return compose("config", overrides=[f"run_dir={tmp_path}", *overrides])

    return _make


TINY = (
    "actors.total_frames=600",
    "actors.frames_per_batch=100",
    "actors.init_random_frames=100",
    "algo.learning_starts=200",
    "algo.batch_size=32",
    "eval.every_frames=300",
    "eval.episodes=1",
    "eval.max_steps=1000",  # every shipped env's episode fits; an Atari game would run to 27000
)
"""Overrides that make any experiment finish in seconds (a smoke run, not a learning run)."""

TINY_ON_POLICY = (
    "actors.total_frames=512",
    "actors.frames_per_batch=128",
    "algo.epochs=2",
    "algo.minibatch_size=64",
    "eval.every_frames=256",
    "eval.episodes=1",
    "eval.max_steps=1000",
)
""":data:`TINY` for an on-policy experiment (no replay: no learning starts, no random frames)."""
