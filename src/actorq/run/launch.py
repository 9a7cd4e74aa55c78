"""What ``actorq train`` checks and arranges before Hydra runs.

A sweep (``-m``) is checked whole before its first job starts: every job's overrides are
composed and its config checked as :func:`actorq.run.build.check_job` does, so a bad value in
job 5 stops the sweep in one line (exit code 2) before job 0 trains. A key set where nothing
reads it (:func:`actorq.run.checks.unread_keys`) stops the sweep when no job reads it; when only
some do (``quant.engine=onednn`` across ``quant.bits=32,8``: the fp32 jobs have no engine),
the sweep runs, with one warning naming the jobs that ignore it. The jobs are the ones
Hydra's basic sweeper launches: the cartesian product of the comma lists and
``range(...)`` values, in the order given.

A config key given as a flag, ``--KEY VALUE`` (RL Zoo's ``--algo ppo --env CartPole-v1``), is
that ``KEY=VALUE`` (:func:`flag_overrides`); any other flag but Hydra's own is refused in one
line that gives the ``KEY=VALUE`` form.

A single run given ``run_dir=PATH`` keeps Hydra's own output there too
(:func:`logs_in_run_dir`). An output dir named on the command line that cannot be created
or written to stops the run in one line before Hydra starts (:func:`unwritable_dir_error`).

Example:
    >>> sweep_jobs(["+experiment=dqn_cartpole", "quant.bits=32,8", "seed=range(0,2)"])
    ... # doctest: +NORMALIZE_WHITESPACE
    [['+experiment=dqn_cartpole', 'quant.bits=32', 'seed=0'], ['+experiment=dqn_cartpole', 'quant.bits=32', 'seed=1'],
     ['+experiment=dqn_cartpole', 'quant.bits=8', 'seed=0'], ['+experiment=dqn_cartpole', 'quant.bits=8', 'seed=1']]
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import open_dict

from actorq.run.checks import TOP_LEVEL_KEYS, composed, config_overrides, unread_keys
from actorq.util.errors import ConfigError

MULTIRUN_FLAGS = ("-m", "--multirun")
# The output dirs a command line can name, for a single run (False) and a sweep (True).
OUTPUT_DIR_KEYS = {False: ("run_dir", "hydra.run.dir"), True: ("run_dir", "hydra.sweep.dir")}


FLAG_KEYS = {"experiment": "+experiment", **{key: key for key in sorted(TOP_LEVEL_KEYS - {"hydra"})}}
"""The config keys (and the experiment) a flag can set: ``--seed 1`` is ``seed=1``."""
OTHER_TOOLS_FLAGS = {"-n": "actors.total_frames", "--n-timesteps": "actors.total_frames",
                     "--eval-freq": "eval.every_frames", "--eval-episodes": "eval.episodes"}
"""RL Zoo's flags that are keys here under other names."""


def flag_overrides(argv: list[str]) -> list[str]:
    """``argv`` with each ``--KEY VALUE`` or ``--KEY=VALUE`` whose ``KEY`` is a config key
    (``-`` read as ``_``; a group's key dotted, ``--actors.total_frames``) written
    ``KEY=VALUE``, and ``--experiment NAME`` as ``+experiment=NAME``; Hydra's own flags stay.

    Raises:
        ConfigError: any other flag, in one line that says the ``KEY=VALUE`` to use.

    >>> flag_overrides(["--algo", "ppo", "--env=CartPole-v1", "-m", "--run-dir", "runs/a", "--cfg", "job"])
    ['algo=ppo', 'env=CartPole-v1', '-m', 'run_dir=runs/a', '--cfg', 'job']
    >>> flag_overrides(["--algo", "ppo", "-n", "1000"])
    Traceback (most recent call last):
    ...
    actorq.util.errors.ConfigError: -n: actorq train takes KEY=VALUE, not this flag: say actors.total_frames=1000
    """
    from hydra._internal.utils import get_args_parser  # the flags @hydra.main parses

    hydra_flags = {flag for action in get_args_parser()._actions for flag in action.option_strings}
    rewritten, rest = [], list(argv)
    while rest:
        arg = rest.pop(0)
        flag, equals, value = arg.partition("=")
        if not arg.startswith("-") or flag in hydra_flags:
            rewritten.append(arg)
            continue
        if not equals and rest and not rest[0].startswith("-") and "=" not in rest[0]:
            value, equals = rest.pop(0), "="
        rewritten.append(_flag_override(flag, value if equals else None))
    return rewritten


def _flag_override(flag: str, value: str | None) -> str:
    """``KEY=VALUE`` for a config key's flag and its value, or the one-line refusal."""
    root, dot, below = flag.lstrip("-").replace("-", "_").partition(".")
    key = FLAG_KEYS.get(root) if flag.startswith("--") else None
    if key is not None and value is not None:
        return f"{key}{dot}{below}={value}"
    say = OTHER_TOOLS_FLAGS.get(flag) or (f"{key}{dot}{below}" if key else "KEY")
    where = " (actorq train --help lists the keys)" if say == "KEY" else ""
    raise ConfigError(f"{flag}: actorq train takes KEY=VALUE, not this flag: say {say}={value or 'VALUE'}{where}")


def sweep_jobs(overrides: list[str]) -> list[list[str]]:
    """Each job's overrides, as the basic sweeper expands ``overrides``; raises
    :class:`~actorq.util.errors.ConfigError` for a sweep it cannot expand."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as error:
        raise ConfigError(str(error).splitlines()[0]) from error
    choices: dict[str, list[str]] = {}
    for override in parsed:
        key = override.get_key_element()
        if not override.is_sweep_override():
            choices[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            choices[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            raise ConfigError(f"{override.input_line}: a sweep needs a list of values (a,b,c) or range(start,stop)")
    return [list(job) for job in itertools.product(*choices.values())]


def sweep_error(argv: list[str]) -> str | None:
    """Why the sweep ``argv`` (with ``-m``) would stop, in one line naming the first bad job;
    ``None`` if every job composes and passes its checks (or ``argv`` is no plain sweep)."""
    flags = [arg for arg in argv if arg.startswith("-")]
    if not flags or set(flags) - set(MULTIRUN_FLAGS):
        return None  # a single run, or Hydra's own flags (--help, --cfg, ...)
    try:
        jobs = sweep_jobs(config_overrides(argv))
    except ConfigError as error:
        return str(error)
    unread: list[dict[str, str]] = []
    for number, job in enumerate(jobs):
        error, job_unread = job_error(job)
        unread.append(job_unread)
        if error is not None:
            return f"sweep job {number} ({' '.join(job)}): {error}; no job was started"
    return unread_in_sweep(jobs, unread)


def unread_in_sweep(jobs: list[list[str]], unread: list[dict[str, str]]) -> str | None:
    """The error for a key that no job of the sweep reads; a key only some jobs read gets one
    warning on stderr, naming the jobs that ignore it.

    >>> jobs = [["quant.bits=32", "quant.engine=onednn"], ["quant.bits=16", "quant.engine=onednn"]]
    >>> why = {"quant.engine": "quant.engine=onednn needs quant.bits=8"}
    >>> unread_in_sweep(jobs, [why, why])
    'sweep job 0 (quant.bits=32 quant.engine=onednn): quant.engine=onednn needs quant.bits=8; no job of the sweep reads it, no job was started'
    """
    for key in dict.fromkeys(key for job_unread in unread for key in job_unread):
        ignoring = [number for number, job_unread in enumerate(unread) if key in job_unread]
        why = unread[ignoring[0]][key]
        if len(ignoring) == len(jobs):
            return f"sweep job 0 ({' '.join(jobs[0])}): {why}; no job of the sweep reads it, no job was started"
        numbers = ", ".join(map(str, ignoring))
        print(f"actorq: warning: sweep job{'s' * (len(ignoring) > 1)} {numbers} ignore{'s' * (len(ignoring) == 1)} "
              f"{key} ({why})", file=sys.stderr)
    return None


def job_error(job: list[str], sweep: bool = True) -> tuple[str | None, dict[str, str]]:
    """Why the job's config fails :func:`actorq.run.build.check_job` (``None`` if it passes), and
    its :func:`~actorq.run.checks.unread_keys`, checked as one job of a sweep or (``sweep=False``)
    as a single run from the command line."""
    from actorq.run.build import check_job

    try:
        cfg = composed(job, return_hydra_config=True)
    except ConfigError as error:
        return str(error), {}
    cfg.hydra.mode = RunMode.MULTIRUN if sweep else RunMode.RUN
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):  # the job's output dir exists only once Hydra launches it
        if not any(item.startswith("run_dir=") for item in job):
            cfg.run_dir = tempfile.gettempdir()
    try:
        check_job(cfg)
    except ConfigError as error:
        return str(error), {}
    finally:
        HydraConfig.instance().cfg = None
    return None, unread_keys(cfg)


def logs_in_run_dir(argv: list[str]) -> list[str]:
    """A single run given ``run_dir=PATH`` keeps Hydra's own output (``.hydra/``, the log)
    in that run dir too, instead of a folder of its own under ``outputs/``.

    >>> logs_in_run_dir(["+experiment=td3_pendulum", "run_dir=runs/a"])
    ['+experiment=td3_pendulum', 'run_dir=runs/a', 'hydra.run.dir=runs/a']
    >>> logs_in_run_dir(["-m", "seed=0,1", "run_dir=runs/a"])  # a sweep's jobs have their own
    ['-m', 'seed=0,1', 'run_dir=runs/a']
    """
    run_dirs = [arg.split("=", 1)[1] for arg in argv if arg.startswith("run_dir=")]
    if not run_dirs or any(arg in MULTIRUN_FLAGS for arg in argv) or \
            any(arg.startswith("hydra.run.dir=") for arg in argv):
        return argv
    return [*argv, f"hydra.run.dir={run_dirs[-1]}"]


def output_dirs(argv: list[str]) -> list[tuple[str, str]]:
    """The output dirs ``argv`` names, as ``(key, path)``: ``run_dir`` and Hydra's
    ``hydra.run.dir`` (a single run) or ``hydra.sweep.dir`` (a sweep, ``-m``). A value Hydra
    still has to resolve (``${now:...}``) or sweep over is left out.

    >>> output_dirs(["run_dir='runs/a b'", "hydra.sweep.dir=sweeps/a", "hydra.run.dir=logs/${now:%H}"])
    [('run_dir', 'runs/a b')]
    >>> output_dirs(["-m", "seed=0,1", "hydra.sweep.dir=sweeps/a", "run_dir=a,b"])
    [('hydra.sweep.dir', 'sweeps/a')]
    """
    keys = OUTPUT_DIR_KEYS[any(arg in MULTIRUN_FLAGS for arg in argv)]
    try:
        parsed = OverridesParser.create().parse_overrides([arg for arg in argv if not arg.startswith("-")])
    except HydraException:
        return []
    named = [(override.key_or_group, override.value()) for override in parsed
             if override.key_or_group in keys and not override.is_sweep_override()]
    return [(key, path) for key, path in named if isinstance(path, str) and path and "${" not in path]


def unwritable_dir_error(argv: list[str]) -> str | None:
    """Why an output dir named in ``argv`` cannot hold the run, in one line naming it (``None``
    if each one can be created and written to, or ``argv`` asks Hydra for something else:
    ``--help``, ``--cfg``). Hydra creates its output dir and writes ``.hydra/`` there before
    actorq's code runs, and reports a failure with a traceback; so each dir is created here
    first, as Hydra would next, and a file is written to it and removed."""
    if {arg for arg in argv if arg.startswith("-")} - set(MULTIRUN_FLAGS):
        return None
    for key, path in output_dirs(argv):
        try:
            Path(path).mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=path).close()
        except OSError as error:
            return f"{key} {path} is not writable: {error.strerror or error}"
    return None
