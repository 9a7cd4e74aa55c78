"""Fuzzing the CLI with bad overrides: every one must stop the run cleanly, before any actor
process starts: one ``actorq: error:`` line, exit code 2, no traceback, no hang, no process
left behind.

The cases are every (key, bad value) pair below plus unknown keys, groups and options and bad
override syntax. All of them go through the CLI's two steps in-process (the composition that
``composition_error`` checks, then ``train``, which must raise ``ConfigError`` before it starts
anything), composing each case once; a fixed-seed sample also goes through the real CLI in
subprocesses, with a timeout each.
"""

from __future__ import annotations

import random
import subprocess
import sys

import psutil
import pytest

from actorq.run.checks import composed
from actorq.util.errors import ConfigError
from actorq.train import train
from tests.conftest import TINY
from tests.helpers import is_service

POSITIVE_INT_KEYS = ("actors.num_workers", "actors.envs_per_worker", "actors.frames_per_batch",
                     "replay.capacity", "algo.batch_size", "algo.n_step", "eval.every_frames", "eval.episodes")
NON_NEGATIVE_INT_KEYS = ("actors.init_random_frames", "actors.max_restarts", "algo.learning_starts")
BAD_POSITIVE_INTS = ("0", "-1", "-1000000", "2.5", "abc", "nan", "inf", "true", "[1,2]", "{a:1}", "''")
HUGE = {"actors.num_workers": "100000", "actors.envs_per_worker": "10000000",
        "actors.frames_per_batch": "1000000000000", "replay.capacity": "1000000000000",
        "algo.batch_size": "1000000000"}
BAD_NON_NEGATIVE_INTS = ("-1", "2.5", "abc", "nan", "true", "[1]")
OTHER_BAD = {
    "algo.lr": ("0", "-1", "nan", "inf", "-inf", "abc", "[1]", "true"),
    "algo.update_to_data": ("0", "-1", "nan", "inf", "abc"),
    "algo.gamma": ("0", "-0.1", "1.5", "nan", "inf", "abc"),
    "seed": ("-1", "2.5", "abc", "nan", "4294967296", "true"),
    "quant.bits": ("0", "1", "3.5", "64", "-8", "abc", "nan", "true", "[8]"),
    "quant.mode": ("nope", "1"),
    "trainer.max_epochs": ("2", "0", "-1", "abc"),
    "actors.restart_on_failure": ("maybe", "2"),
    "actors.backend": ("nope", "1", "''", "Ray"),
    "env.module": ("no_such_suite_module", "3", "''", "[1]", "'not a module'", "{a:1}", "[os,nope.nope]"),
    "actors.collection": ("maybe", "2", "true", "sync"),
    "trainer.devices": ("0", "-1", "1.5", "abc", "true", "auto", "[0,1]",
                        "3"),  # 3: algo.batch_size=32 does not split over 3 learner ranks
    "replay.prioritized": ("yes", "1", "[true]"),
    "replay.shared": ("maybe", "0"),
    "replay.checkpoint": ("2", "abc"),
    "actors.lean_envs": ("maybe", "1"),
    "eval.stop_at_return": ("abc", "nan", "inf", "-inf", "true", "[475]", "''"),
    # read only with replay.prioritized=true (fanout: or replay.shared=true), actors.backend=ray,
    # quant.bits=auto, quant.bits=8 or auto: nothing reads them in this run
    "replay.alpha": ("-1", "0.7"),
    "replay.beta": ("0.5", "2"),
    "replay.beta_annealing_steps": ("10",),
    "replay.eps": ("0.1",),
    "replay.fanout": ("8", "6"),
    "actors.ray.address": ("auto",),
    "actors.ray.num_cpus": ("2", "-1"),
    "actors.ray.requests_in_flight": ("4",),
    "actors.ray.resources": ("{node:1}",),
    "quant.auto_tolerance": ("0.1",),
    "quant.engine": ("x86",),
    # set through eval.*: one spelling for each setting
    "callbacks.evaluation.every_frames": ("100",),
    "callbacks.evaluation.episodes": ("2",),
}
STRUCTURE = (["nope=1"], ["algo.nope=1"], ["actors.nope=2"], ["+nope.key=1"], ["algo=nope"], ["env=nope"],
             ["replay=nope"], ["+experiment=nope"], ["quant.bits=[8"], ["=1"], ["actors.num_workers=(1"],
             ["actors.backend=ray", "actors.ray.num_cpus=-1"], ["actors.backend=ray", "actors.ray.num_cpus=nan"],
             ["actors.backend=ray", "actors.ray.num_cpus=abc"], ["actors.backend=ray", "actors.ray.address=''"],
             ["actors.backend=ray", "actors.ray.nope=1"], ["actors.backend=ray", "actors.ray.requests_in_flight=0"],
             ["actors.backend=ray", "actors.ray.requests_in_flight=1.5"],
             ["actors.backend=ray", "actors.ray.requests_in_flight=true"], ["+trainer.num_nodes=2"], ["+trainer.num_nodes=0"],
             ["replay=prioritized"], ["replay=uniform"], ["quant.bits=16", "quant.engine=x86"],
             ["replay.shared=true", "replay.alpha=0.5"], ["quant.bits=8", "quant.auto_tolerance=0.1"],
             ["quant.format=int4_packed", "quant.bits=8"], ["quant.format=int4_packed", "quant.bits=auto"],
             ["quant.format=int4_packed"], ["quant.format=int4"], ["eval.stop_at_return=475", "~callbacks.evaluation"],
             ["callbacks.evaluation.stop_at_return=475"])


def all_cases() -> list[list[str]]:
    cases = [[f"{key}={value}"] for key in POSITIVE_INT_KEYS for value in BAD_POSITIVE_INTS]
    cases += [[f"{key}={value}"] for key, value in HUGE.items()]
    cases += [[f"{key}={value}"] for key in NON_NEGATIVE_INT_KEYS for value in BAD_NON_NEGATIVE_INTS]
    cases += [[f"{key}={value}"] for key, values in OTHER_BAD.items() for value in values]
    return cases + [list(case) for case in STRUCTURE]


CASES = all_cases()
SUBPROCESS_CASES = random.Random(0).sample(CASES, 8)


def stray_processes() -> list[psutil.Process]:
    """Children of this process but multiprocessing's resource tracker and fork server (which
    live as long as the test session)."""
    return [child for child in psutil.Process().children(recursive=True) if not is_service(child)]


def test_the_fuzz_covers_many_bad_inputs():
    assert len(CASES) > 150 and len({tuple(case) for case in CASES}) == len(CASES)


def refusal(overrides: list[str], run_dir: str) -> str:
    """What the CLI's checks say about ``overrides`` ('' when the run was not refused)."""
    try:
        cfg = composed([*TINY, "callbacks=no_checkpoint", f"run_dir={run_dir}", *overrides])
        train(cfg)
    except ConfigError as raised:
        return str(raised)
    return ""


def test_every_bad_override_is_refused_in_one_line_before_anything_starts(tmp_path):
    not_clean = {}
    for number, overrides in enumerate(CASES):
        try:
            error = refusal(overrides, str(tmp_path / str(number)))
        except Exception as other:  # noqa: BLE001  any other exception is a finding
            error = f"{type(other).__name__}: {other}\n"
        stray = [" ".join(process.cmdline()[:4]) for process in stray_processes()]
        if not error or "\n" in error or stray:
            not_clean[" ".join(overrides)] = f"{error or 'not refused'}{f'; left running: {stray}' if stray else ''}"
    assert not not_clean, f"{len(not_clean)} of {len(CASES)} not refused cleanly: {not_clean}"


@pytest.mark.parametrize("overrides", SUBPROCESS_CASES, ids=[" ".join(c) for c in SUBPROCESS_CASES])
def test_the_cli_refuses_a_bad_override_in_one_line_with_exit_2(overrides, tmp_path):
    process = subprocess.Popen([sys.executable, "-m", "actorq", *TINY, "callbacks=no_checkpoint",
                                f"run_dir={tmp_path}", *overrides],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        _, stderr = process.communicate(timeout=60)
    finally:
        for child in psutil.Process(process.pid).children(recursive=True) if process.poll() is None else []:
            child.kill()
        process.kill()
    assert process.returncode == 2, stderr[-2000:]
    assert "Traceback" not in stderr
    assert [line for line in stderr.splitlines() if line.startswith("actorq: error: ")]
    assert not stray_processes()
