"""The ``actorq`` command (and ``actorq train``): ``actorq COMMAND ...``, where
:data:`COMMANDS` are train, resume, evaluate, export, report and bench. Overrides alone
(``actorq +experiment=NAME key=value ...``) train, as ``actorq train`` does.

Exit codes: 0 done, 2 bad input (a one-line ``actorq: error: ...``: an unknown key, group or
option, bad override syntax, a value out of range, a ``run_dir`` or Hydra output dir that
cannot be written), 130/143 interrupted (Ctrl-C/SIGTERM), 1 a failed run (one line for a NaN
or inf in training or an actor worker that kept failing, a traceback for anything unforeseen).
"""

from __future__ import annotations

import shlex
import sys
import textwrap
from pathlib import Path
from typing import NoReturn

import hydra
from omegaconf import DictConfig

from actorq.run.checks import check_run_config, composition_error
from actorq.run.console import lightning_logs_through_root
from actorq.util.errors import ConfigError, NonFiniteError
from actorq.run.env_ids import env_overrides
from actorq.run.launch import flag_overrides, logs_in_run_dir, sweep_error, unwritable_dir_error

COMMANDS = {
    "train": ("[+experiment=NAME | algo=A env=E] [KEY=VALUE ...] [-m]",
              "train one run, or a sweep of runs with -m (`actorq train --help`: keys and experiments)"),
    "resume": ("RUN_DIR [KEY=VALUE ...]",
               "continue a run from its last checkpoint with the overrides it was started with; "
               "a larger actors.total_frames extends a finished run"),
    "evaluate": ("RUN_DIR [episodes=N] [video=true] [policy=quantized] ...", "score a run's policy, and film it"),
    "export": ("RUN_DIR|CHECKPOINT OUT [bits=N]", "a run's policy as one TorchScript file"),
    "report": ("DIR [DIR ...] [out=DIR] [target_return=R]", "runs and sweeps -> report.md and plots: where int8 actors pay"),
    "bench": ("NAME [KEY=VALUE ...]", "the benchmarks (`actorq bench --help` lists them)"),
}
"""Each command's arguments and what it does, as ``actorq --help`` prints them."""


@hydra.main(version_base="1.3", config_path="pkg://actorq.conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    try:
        check_run_config(cfg)  # before importing Lightning and TorchRL: a bad value is refused in seconds
    except ConfigError as error:
        refuse(error)
    from actorq.actors.pool import ActorWorkerError
    from actorq.train import Interrupted, describe_outputs, describe_result, train

    lightning_logs_through_root()
    try:
        summary, _ = train(cfg)
    except ConfigError as error:  # what only train() can check (a checkpoint to resume, the env's actions)
        refuse(error)
    except (NonFiniteError, ActorWorkerError) as error:
        print(f"actorq: error: {error} (summary.json: status failed, in {cfg.run_dir})", file=sys.stderr)
        sys.exit(1)
    except Interrupted:
        print(f"actorq: interrupted; the last checkpoint and summary.json (status: interrupted) "
              f"are in {cfg.run_dir}", file=sys.stderr)
        raise
    if summary.get("rank", 0) > 0:  # a learner rank of trainer.devices > 1: rank 0 reports
        return None
    print(describe_result(summary))
    print(describe_outputs(cfg))
    return summary["final_return"]


def refuse(error: object) -> NoReturn:
    """``actorq: error: ...`` on stderr, exit code 2: bad input."""
    print(f"actorq: error: {error}", file=sys.stderr)
    sys.exit(2)


def usage() -> str:
    """``actorq --help``: the commands, each with its arguments."""
    width = max(map(len, COMMANDS))
    lines = ["actorq: train an RL agent whose actors run a quantized (int8) copy of the policy.", "",
             "Usage: actorq COMMAND [ARGS]   (python -m actorq COMMAND [ARGS] is the same)", "", "Commands:"]
    for name, (arguments, what) in COMMANDS.items():
        lines += [f"  {name:<{width}}  {arguments}",
                  *textwrap.wrap(what, 96, initial_indent=" " * (width + 6), subsequent_indent=" " * (width + 6))]
    lines += ["", "Every option is KEY=VALUE (train, export and bench take --key VALUE flags too).",
              "`actorq COMMAND --help` shows a command's options. Overrides without a command train:",
              "  actorq +experiment=ppo_cartpole quant.bits=8", "  actorq algo=sac env=pendulum"]
    return "\n".join(lines)


def train_command(argv: list[str]) -> None:
    """``actorq train``: config keys given as flags are ``KEY=VALUE``, an environment's id is
    the env file of its library and ``env.name``; the overrides must compose (every job of a
    sweep, each checked too) and the output dirs they name must be writable, then Hydra runs."""
    try:
        argv = env_overrides(flag_overrides(argv))
    except ConfigError as error:
        refuse(error)
    error = composition_error(argv) or sweep_error(argv) or unwritable_dir_error(argv)
    if error is not None:
        refuse(error)
    sys.argv[1:] = logs_in_run_dir(argv)
    main()


def resume_command(argv: list[str]) -> None:
    """``actorq resume RUN_DIR [KEY=VALUE ...]``: ``actorq train`` with the overrides the run was
    started with, then these, in that run dir, from its last checkpoint."""
    if not argv or argv[0] in ("-h", "--help"):
        print(f"Usage: actorq resume {COMMANDS['resume'][0]}\n  {COMMANDS['resume'][1]}")
        sys.exit(0 if argv else 2)
    from actorq.run.resume import resume_overrides  # imports torch, to read checkpoints

    try:
        overrides = resume_overrides(Path(argv[0]).expanduser(), argv[1:])
    except ConfigError as error:
        refuse(error)
    print(f"actorq resume: actorq train {shlex.join(overrides)}", file=sys.stderr)
    train_command(overrides)


def cli(argv: list[str] | None = None) -> None:
    """``actorq COMMAND ...`` and ``python -m actorq COMMAND ...``."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return
    command, rest = argv[0], argv[1:]
    if command == "train":
        train_command(rest)
    elif command == "resume":
        resume_command(rest)
    elif command == "evaluate":
        from actorq.evaluate import main as evaluate
        evaluate(rest)
    elif command == "export":
        from actorq.export import main as export
        export(rest)
    elif command == "report":
        from actorq.report import main as report
        sys.exit(report(rest))
    elif command == "bench":
        from actorq.bench.__main__ import main as bench
        bench(rest)
    elif "=" in command or command.startswith(("-", "+", "~")):
        train_command(argv)  # overrides alone: the form every earlier version took
    else:
        refuse(f"unknown command {command!r}; the commands are {', '.join(COMMANDS)} (actorq --help)")


if __name__ == "__main__":
    cli()
