"""``python -m actorq +experiment=NAME key=value ...``: train one run (or a sweep with -m).

Exit codes: 0 done, 2 bad input (a one-line ``actorq: error: ...``: an unknown key, group or
option, bad override syntax, a value out of range, a ``run_dir`` or Hydra output dir that
cannot be written), 130/143 interrupted (Ctrl-C/SIGTERM), 1 a failed run (one line for a NaN
or inf in training or an actor worker that kept failing, a traceback for anything unforeseen).
"""

from __future__ import annotations

import sys
from typing import NoReturn

import hydra
from omegaconf import DictConfig

from actorq.run.checks import check_run_config, composition_error
from actorq.run.console import lightning_logs_through_root
from actorq.util.errors import ConfigError, NonFiniteError
from actorq.run.launch import logs_in_run_dir, sweep_error, unwritable_dir_error


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


def cli() -> None:
    """``python -m actorq`` and the ``actorq`` command: the overrides must compose (every job
    of a sweep, each checked too) and the output dirs they name must be writable, then Hydra
    runs."""
    error = composition_error(sys.argv[1:]) or sweep_error(sys.argv[1:]) or unwritable_dir_error(sys.argv[1:])
    if error is not None:
        refuse(error)
    sys.argv[1:] = logs_in_run_dir(sys.argv[1:])
    main()


if __name__ == "__main__":
    cli()
