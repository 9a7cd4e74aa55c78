"""An environment named by its id wherever an env is named: ``env=CartPole-v1``.

The ``env`` group's options are env files (``conf/env/*.yaml``, and those of a config folder
of one's own on ``hydra.searchpath``), each an environment's name and the library that
builds it. :func:`env_overrides` takes ``env=X`` where ``X`` is no env file as an
environment's name, asks the env suites which one has it (:func:`actorq.envs.find_suite`:
gymnasium ids, dm_control tasks, ale-py's Atari ids, an env factory ``module:name``, a suite
of one's own registered by the ``env.module`` given with it) and writes it as an env file of
that library and ``env.name=X``, before Hydra composes: the command line, ``actorq.config``
and ``actorq.learn`` all go through it, and the run's saved overrides are the rewritten ones.
A name no suite knows is refused in one line naming the closest names. An env file stays as
it is, and naming nothing but env files imports no env library.

Example:
    >>> env_overrides(["algo=ppo", "env=Acrobot-v1", "seed=1"])
    ['algo=ppo', 'env=cartpole', 'env.name=Acrobot-v1', 'seed=1']
    >>> env_overrides(["env=Pendulum-v1"]), env_overrides(["env=pendulum"])  # an env file's own env: the file
    (['env=pendulum'], ['env=pendulum'])
    >>> env_overrides(["-m", "env=cartpole,Pendulum-v1"])
    ['-m', 'env=cartpole,pendulum']
    >>> env_overrides(["env=ALE/Pong-v5"])
    ['env=pong', 'env.name=ALE/Pong-v5']
    >>> env_overrides(["algo=ppo", "env.name=PongNoFrameskip-v4"])  # alone, env.name=ID is env=ID
    ['algo=ppo', 'env=pong', 'env.name=PongNoFrameskip-v4']
    >>> env_overrides(["-m", "env=Acrobot-v1,cartpole"])  # a sweep over one library's envs
    ['-m', 'env=cartpole', 'env.name=Acrobot-v1,CartPole-v1']
    >>> env_overrides(["env=Acrobot-v2"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    actorq.util.errors.ConfigError: env=Acrobot-v2: no env file or environment has this name; did you mean Acrobot-v1, ...
"""

from __future__ import annotations

import importlib.resources
from functools import cache
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, Override
from hydra.errors import HydraException
from omegaconf import OmegaConf

from actorq.util.errors import ConfigError
from actorq.util.values import override_value


@cache
def env_files() -> dict[str, tuple[str, str]]:
    """``{file: (env.name, env.library)}`` of the shipped env files."""
    folder = importlib.resources.files("actorq.conf") / "env"
    files = {}
    for path in folder.iterdir():
        if path.name.endswith(".yaml"):
            env = OmegaConf.load(path)
            files[path.name.removesuffix(".yaml")] = (env.name, env.library)
    return dict(sorted(files.items()))


@cache
def default_env_file() -> str:
    """The env file ``conf/config.yaml``'s defaults pick."""
    config = OmegaConf.load(importlib.resources.files("actorq.conf") / "config.yaml")
    defaults = OmegaConf.to_container(config.defaults)
    return next(item["env"] for item in defaults if isinstance(item, dict) and "env" in item)


def env_overrides(overrides: list[str]) -> list[str]:
    """``overrides`` with each ``env=X`` where ``X`` is no env file written as an env file
    of the library that has ``X``, and ``env.name=X`` (and ``env.library`` where no env file
    of that library ships); a sweep ``env=X,Y`` over one library's envs becomes a sweep of
    ``env.name``. What is not an ``env=`` override is left as it is.

    Raises:
        ConfigError: in one line, for a name no env library knows (with the closest names),
            one that several know or only another library than ``env.library`` has, an
            ``env.module`` that cannot be imported, or a sweep across env libraries.
    """
    rewritten = []
    alone = _name_alone(overrides)
    for arg in overrides:
        if arg.startswith("env="):
            rewritten += _env_choice(arg, overrides)
        elif arg == alone:  # env.name=ID with nothing else naming the env: as env=ID
            try:
                rewritten += _env_choice(f"env={arg.split('=', 1)[1]}", overrides)
            except ConfigError as error:  # named as the user named it
                raise ConfigError(str(error).replace("env=", "env.name=", 1)) from error
        else:
            rewritten.append(arg)
    return rewritten


def _name_alone(overrides: list[str]) -> str | None:
    """The ``env.name=ID`` override when nothing else names the env (no ``env=``, no
    ``env.library``, no experiment, whose env file would say which library builds it): then
    the default env file's library need not be ID's (``env.name=PongNoFrameskip-v4`` alone is
    Atari), so it is written as ``env=ID`` is. None otherwise, or for a sweep.

    Example:
        >>> _name_alone(["algo=ppo", "env.name=ALE/Pong-v5"]), _name_alone(["env=pong", "env.name=ALE/Pong-v5"])
        ('env.name=ALE/Pong-v5', None)
    """
    keys = [arg.lstrip("+~").split("=", 1)[0] for arg in overrides]
    if {"env", "env.library", "experiment"} & set(keys) or keys.count("env.name") != 1:
        return None
    arg = overrides[keys.index("env.name")]
    override = _parsed(arg)
    if override is None or override.is_sweep_override() or not isinstance(override.value(), str):
        return None
    return arg


def _env_choice(arg: str, overrides: list[str]) -> list[str]:
    override = _parsed(arg)
    values = None if override is None else _values(override)
    files = {**env_files(), **dict.fromkeys(_searchpath_files(overrides))}
    if values is None or all(value in files for value in values):
        return [arg]  # an env file (or a sweep Hydra expands itself): Hydra's to compose
    library = _given(overrides, "env.library")
    file_of = {name: file for file, (name, _) in reversed(env_files().items())}
    if library is None and all(value in files or value in file_of for value in values):
        return [f"env={','.join(file_of.get(value, value) for value in values)}"]  # no env library imported
    from actorq.envs import import_suites

    import_suites(_given(overrides, "env.module"))
    if any(value in files and files[value] is None for value in values):
        raise ConfigError(f"{arg}: a sweep over env files of your own and environment names cannot be "
                          "written as one; sweep env.name=A,B instead")
    picked = [files[value] if value in files else (value, _library_of(value, library, list(files)))
              for value in values]
    libraries = sorted({lib for _, lib in picked})
    if len(libraries) > 1:
        raise ConfigError(f"{arg}: a sweep's environments must share one env library (here "
                          f"{', '.join(libraries)}); run one sweep for each library")
    names = [name for name, _ in picked]
    file = _file_for(libraries[0], names, env_files())
    if len(names) == 1 and env_files()[file] == (names[0], libraries[0]):
        return [f"env={file}"]
    extra = [] if env_files()[file][1] == libraries[0] else [f"env.library={libraries[0]}"]
    return [f"env={file}", f"env.name={','.join(map(override_value, names))}", *extra]


def _library_of(name: str, library: str | None, files: list[str]) -> str:
    """The env library that has ``name`` (``library`` if it is given and has it)."""
    from actorq.envs import find_suite, suites

    try:
        return find_suite(name, library).name
    except ConfigError as error:
        if library is not None or any(suite.knows(name) for suite in suites().values()):
            raise ConfigError(f"env={name}: {error}") from error
        raise ConfigError(_unknown(name, files)) from error


def _unknown(name: str, files: list[str]) -> str:
    """The one line for a name that is no env file and no environment of any env library."""
    from actorq.envs import suites
    from actorq.envs.atari import ale_py_missing
    from actorq.envs.registry import closest, known_names

    if ale_py_missing(name):
        return f"env={name}: {ale_py_missing(name)}"
    close = closest(name, known_names() + files)
    guess = f"; did you mean {', '.join(close)}?" if close else "."
    return (f"env={name}: no env file or environment has this name{guess} Name an environment by its id, "
            f"env=ID (the same as env.name=ID; env libraries: {', '.join(sorted(suites()))}), or by an env file, "
            f"env=FILE ({', '.join(files)})")


def _file_for(library: str, names: list[str], files: dict[str, tuple[str, str]]) -> str:
    """The env file to start from: of ``library``, the one whose env's name the name given
    holds (``pong`` for ``ALE/Pong-v5``, itself for ``CartPole-v1``), else the default env file
    if it is of ``library``, else ``library``'s first; the default for a library without one."""
    of_library = [file for file, (_, lib) in files.items() if lib == library]
    holding = [file for file in of_library if len(names) == 1 and files[file][0].lower() in names[0].lower()]
    default = default_env_file()
    if holding:
        return holding[0]
    if default in of_library or not of_library:
        return default
    return of_library[0]


def _parsed(arg: str) -> Override | None:
    try:
        return OverridesParser.create().parse_overrides([arg])[0]
    except HydraException:
        return None  # Hydra says what is wrong with it


def _values(override: Override) -> list[str] | None:
    """The value of an override, or each of a sweep's listed values (``None`` for any other sweep)."""
    if not override.is_sweep_override():
        value = override.value()
        return [value] if isinstance(value, str) else None
    sweep = override.value()
    if not isinstance(sweep, ChoiceSweep) or not sweep.simple_form:
        return None
    return [getattr(item, "text", item) for item in sweep.list] if all(
        isinstance(getattr(item, "text", item), str) for item in sweep.list) else None


def _given(overrides: list[str], key: str):
    """The value the last override of ``key`` gives (``None`` without one, or for a sweep)."""
    for arg in reversed(overrides):
        if arg.lstrip("+").split("=", 1)[0] == key:
            override = _parsed(arg.lstrip("+"))
            return None if override is None or override.is_sweep_override() else override.value()
    return None


def _searchpath_files(overrides: list[str]) -> list[str]:
    """The env files of the config folders ``hydra.searchpath`` adds (``file://`` or ``pkg://``)."""
    folders = _given(overrides, "hydra.searchpath") or []
    found = []
    for folder in folders if isinstance(folders, list) else [folders]:
        scheme, _, where = str(folder).partition("://")
        try:
            root = Path(where) if scheme == "file" else importlib.resources.files(where) if scheme == "pkg" else None
            found += [path.name.removesuffix(".yaml") for path in (root / "env").iterdir()
                      if path.name.endswith(".yaml")] if root is not None else []
        except (OSError, ModuleNotFoundError, TypeError):
            continue
    return found
