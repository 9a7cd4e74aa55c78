"""Every shell command the README and docs/ show, and every example ``actorq --help`` and
``actorq train --help`` give, is checked here the way the command checks its input before it
starts, or its block says why it is not.

- ``actorq train`` (and overrides alone): composed and put through every check a run makes
  before its actors start (:func:`actorq.run.launch.job_error`), each job of a ``-m`` sweep;
- ``actorq resume RUN_DIR ...``: its overrides compose;
- ``actorq evaluate``, ``export``, ``report``, ``bench NAME``, and the maintainers'
  ``python -m benchmarks.NAME``: their arguments parse;
- ``make TARGET``: the Makefile has the target.

A block of anything else (``pip``, ``ray start``, a shell loop, a command that needs an
experiment of the user's own) is preceded by ``<!-- not checked: WHY -->``. The runs
themselves (tiny budgets) are in tests/integration.
"""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest

from actorq.__main__ import COMMANDS, usage
from actorq.bench.__main__ import BENCHMARKS
from actorq.run.checks import composition_error
from actorq.run.launch import MULTIRUN_FLAGS, job_error, sweep_jobs

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"(?:<!-- not checked: (?P<why>[^>]+) -->\n)?```bash\n(?P<body>.*?)```", re.S)
MAKE_TARGETS = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


def shown_commands() -> list[tuple[str, list[str]]]:
    """``(where, argv)`` of every command in an unmarked ``bash`` block."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for block in BLOCK.finditer(text):
            if block["why"]:
                continue
            line = text[: block.start("body")].count("\n") + 1
            for offset, command in enumerate(block["body"].replace("\\\n", " ").splitlines()):
                argv = shlex.split(command, comments=True)
                if argv:
                    found.append((f"{page.relative_to(ROOT)}:{line + offset}", argv))
    return found


HELP_HEADINGS = ("Examples:", "Overrides without a command train:")
"""The lines after which ``actorq --help`` and ``actorq train --help`` list example commands."""


def help_examples() -> list[tuple[str, list[str]]]:
    """``(where, argv)`` of every example command ``actorq --help`` and ``actorq train --help``
    show (the latter's template is ``conf/hydra/help/actorq.yaml``)."""
    texts = {"actorq --help": usage(), "actorq train --help": (ROOT / "conf" / "hydra" / "help" / "actorq.yaml").read_text()}
    found = []
    for where, text in texts.items():
        listing = False
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.endswith(HELP_HEADINGS):
                listing = True
            elif listing and stripped.startswith("actorq "):
                found.append((f"{where}: {stripped}", shlex.split(stripped)))
            else:
                listing = False
    return found


COMMANDS_SHOWN = shown_commands() + help_examples()


def as_actorq(argv: list[str]) -> list[str] | None:
    """The arguments after ``actorq`` (``.venv/bin/actorq``, ``python -m actorq``), or None."""
    if Path(argv[0]).name == "actorq":
        return argv[1:]
    if Path(argv[0]).name.startswith("python") and argv[1:3] == ["-m", "actorq"]:
        return argv[3:]
    return None


def check_train(args: list[str]) -> None:
    if {"--help", "-h"} & set(args):
        return
    args = [arg for arg in args if arg not in ("--cfg", "job")]
    overrides = [arg for arg in args if not arg.lstrip("+").startswith("hydra.")]
    sweep = any(arg in MULTIRUN_FLAGS for arg in overrides)
    overrides = [arg for arg in overrides if arg not in MULTIRUN_FLAGS]
    for job in sweep_jobs(overrides) if sweep else [overrides]:
        error, _ = job_error(job, sweep=sweep)
        assert error is None, error


def check(argv: list[str]) -> None:
    args = as_actorq(argv)
    if args is None and argv[1:2] == ["-m"] and argv[2].startswith("benchmarks."):
        importlib.import_module(argv[2]).parse_args(argv[3:])
        return
    if args is None:
        assert argv[0] == "make" and argv[1] in MAKE_TARGETS, f"not a command this test checks: {shlex.join(argv)}"
        return
    command, rest = (args[0], args[1:]) if args and args[0] in COMMANDS else ("train", args)
    if command == "train":
        check_train(rest)
    elif command == "resume":
        assert composition_error(rest[1:]) is None
    elif command == "evaluate":
        from actorq.evaluate import parse_args
        parse_args(rest)
    elif command in ("export", "report"):
        importlib.import_module(f"actorq.{command}").parse_args(rest)
    else:  # bench
        assert rest[0] in BENCHMARKS, rest[0]
        importlib.import_module(f"actorq.bench.{rest[0]}").parse_args(rest[1:])


def test_the_pages_show_commands_and_mark_the_blocks_left_unchecked():
    assert len(COMMANDS_SHOWN) > 40
    assert any(where.startswith("README.md") for where, _ in COMMANDS_SHOWN)


def test_the_help_texts_examples_are_checked_too():
    examples = [where for where, _ in help_examples()]
    assert sum(where.startswith("actorq --help") for where in examples) >= 2
    assert sum(where.startswith("actorq train --help") for where in examples) >= 5


@pytest.mark.parametrize(("where", "argv"), COMMANDS_SHOWN, ids=[where for where, _ in COMMANDS_SHOWN])
def test_every_command_shown_passes_the_checks_it_makes_before_it_runs(where, argv):
    try:
        check(argv)
    except SystemExit as exit_:  # argparse: --help exits 0, bad arguments exit 2
        assert exit_.code in (0, None), f"{where}: {shlex.join(argv)}"
