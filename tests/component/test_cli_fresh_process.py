"""The ``actorq`` command in a fresh interpreter, as a shell runs it: help and the overrides
the config checks refuse answer without importing torch."""

import subprocess
import sys


HEAVY = ("torch", "tensordict", "torchrl", "lightning")
"""What a run needs and ``actorq --help`` or a refused override must not wait for (about 7 s
to import on a 2-core machine)."""


def test_help_and_an_override_the_config_checks_refuse_import_no_torch(tmp_path):
    """In a fresh interpreter, as the command line runs; ``env.module`` unset, as runs have it."""
    script = f"""
import sys
from actorq.__main__ import cli
run_dir = "run_dir={tmp_path}"
for argv in (["--help"], ["resume", "--help"], ["train", "seed=-1", run_dir],
             ["train", "actors.num_workers=0", run_dir], ["+experiment=ppo_cartpole", "eval.episodes=0", run_dir],
             ["train", "env=CartPole-v1", "seed=-1", run_dir], ["train", "--algo", "ppo", "-n", "100"]):
    try:
        cli(argv)
    except SystemExit as exited:
        assert exited.code in (0, 2), (argv, exited.code)
print(sorted(name for name in {HEAVY!r} if name in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == "[]", result.stdout[-2000:]
    assert result.stderr.count("actorq: error:") == 5, result.stderr[-2000:]
