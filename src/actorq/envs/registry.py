"""Environment suites (gymnasium, dm_control, yours) behind one :func:`make_env` call.

A suite is a small :class:`EnvSuite` subclass registered with :func:`register_suite`; its
``name`` is what ``env.library`` in a config names. A suite outside actorq registers itself
when its module is imported: ``env.module`` names that module, and :func:`import_suites`
imports it in every process that builds envs. A suite may take options of its own
(``env.options``, e.g. the ``atari`` suite's ``sticky``), checked by
:meth:`EnvSuite.check_options` and passed to its ``make``/``make_raw`` as keyword arguments.
Nothing here guesses a library from the
shape of an environment name: given no library, :func:`make_env` asks every suite
:meth:`EnvSuite.knows` and needs exactly one yes.

Example:
    >>> {'dm_control', 'gymnasium'} <= set(suites())  # the built-in ones, and any registered
    True
    >>> find_suite("cheetah-run").name
    'dm_control'
    >>> make_env("Pendulum-v1", seed=0, library="gymnasium").observation_spec["observation"].shape
    torch.Size([3])
"""

from __future__ import annotations

import abc
import difflib
import importlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch

from actorq.envs.spec import EPISODE_REWARD, OBSERVATION
from actorq.util.errors import ConfigError

if TYPE_CHECKING:
    from torchrl.envs import EnvBase

    from actorq.envs.raw import RawEnvs


class EnvSuite(abc.ABC):
    """A family of environments that :func:`make_env` can build.

    Subclass it, set ``name`` (the value of ``env.library``), implement :meth:`names` and the
    environment once, and decorate the class with :func:`register_suite`. The environment is
    either :meth:`make_raw` (``n`` raw simulators stepped in numpy: actor workers and
    evaluation step them as one lean batch, and :meth:`make` is derived from them) or, for
    what raw simulators cannot express, :meth:`make` (a TorchRL env with its transforms).

    A suite that takes options (``env.options``) overrides :meth:`check_options`; its
    :meth:`make`, :meth:`make_raw` and :meth:`make_raw_for_evaluation` then take them as
    keyword arguments. A suite without options is called with none.
    """

    name: ClassVar[str] = ""
    """What ``env.library`` says to pick this suite."""

    @abc.abstractmethod
    def names(self) -> list[str]:
        """Every environment name this suite can make (for listings and suggestions)."""

    def knows(self, env_name: str) -> bool:
        """Whether :meth:`make` can build ``env_name``; override when :meth:`names` is slow."""
        return env_name in self.names()

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """``env.options`` checked: the keyword arguments :meth:`make` and :meth:`make_raw`
        take. By default a suite takes none, and any option is a :class:`ConfigError`."""
        if options:
            raise ConfigError(f"env.options: env suite {self.name!r} takes no options, got "
                              f"{', '.join(map(str, options))}")
        return {}

    def make(self, env_name: str, seed: int | None, **options: Any) -> EnvBase:
        """Builds ``env_name``, seeded with ``seed`` unless it is None.

        The environment must have a flat float32 ``"observation"``, a float32 reward and the
        running ``"episode_reward"`` (TorchRL's ``RewardSum``); :func:`make_env` checks this.
        By default one raw env of :meth:`make_raw` behind a
        :class:`~actorq.envs.batched.LeanBatchedEnv`, which has all of that.
        """
        from actorq.envs.batched import LeanBatchedEnv

        raw = self.make_raw(env_name, 1, **options)
        if raw is None:
            raise NotImplementedError(f"env suite {self.name!r} has no raw envs for {env_name!r}: "
                                      "implement make() for it")
        return LeanBatchedEnv(raw, batched=False, seed=seed)

    def make_raw(self, env_name: str, num_envs: int, **options: Any) -> RawEnvs | None:
        """``num_envs`` raw simulators for the lean batched path (:mod:`actorq.envs.batched`),
        or ``None`` (the default) when this suite has none: actor workers then step
        :meth:`make` envs (a ``SerialEnv`` of them for several envs per worker)."""
        return None

    def make_raw_for_evaluation(self, env_name: str, num_envs: int, **options: Any) -> RawEnvs | None:
        """The raw simulators evaluation plays (``make_batched_env(..., evaluation=True)``):
        :meth:`make_raw`'s unless overridden, e.g. whole games with raw scores where training
        ends an episode at a lost life and clips rewards."""
        return self.make_raw(env_name, num_envs, **options)


_SUITES: dict[str, EnvSuite] = {}

S = TypeVar("S", bound=type[EnvSuite])


def register_suite(cls: S) -> S:
    """Class decorator: registers one instance of an :class:`EnvSuite` under ``cls.name``."""
    if not (isinstance(cls, type) and issubclass(cls, EnvSuite)):
        raise TypeError(f"register_suite takes an EnvSuite subclass, not {cls!r}")
    if not cls.name:
        raise ValueError(f"{cls.__name__} needs a non-empty `name` to be registered")
    if cls.make is EnvSuite.make and cls.make_raw is EnvSuite.make_raw:
        raise TypeError(f"{cls.__name__} needs its environment: implement make_raw() (or make())")
    if cls.name in _SUITES:
        raise ValueError(f"an env suite named {cls.name!r} is already registered")
    _SUITES[cls.name] = cls()
    return cls


def unregister_suite(name: str) -> None:
    """Removes a registered suite (for tests and interactive sessions)."""
    if name not in _SUITES:
        raise KeyError(f"no env suite named {name!r} is registered")
    del _SUITES[name]


def suite_modules(modules: str | Sequence[str] | None) -> tuple[str, ...]:
    """The module names ``env.module`` gives (one name, a list of them, or none) as a tuple.

    Raises:
        ConfigError: anything but a non-empty module name or a list of them.
    """
    if modules is None:
        return ()
    names = (modules,) if isinstance(modules, str) else modules
    if not isinstance(names, Sequence) or not all(isinstance(name, str) and name for name in names):
        raise ConfigError(f"env.module must be a module name or a list of module names, got {modules!r}")
    return tuple(names)


def import_suites(modules: str | Sequence[str] | None) -> tuple[str, ...]:
    """Imports the modules that register env suites of their own (``env.module``), in order.

    Every process that builds envs imports them before it does: the run's main process, each
    actor worker process and each Ray actor. Importing a module twice is a no-op.

    Returns:
        The module names, as :func:`suite_modules` gives them.

    Raises:
        ConfigError: a bad ``modules`` value, or a module that cannot be imported (naming the
            module and the error its import raised, in one line).
    """
    names = suite_modules(modules)
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001  any failure of the user's module is a bad env.module
            first_line = (str(error).strip().splitlines() or [""])[0]
            raise ConfigError(f"env.module: cannot import {name!r}: {type(error).__name__}: {first_line}") from error
    return names


def suite_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options ``env.options`` gives (``None``: none) as a plain dict; which options a
    suite takes, and their values, its :meth:`EnvSuite.check_options` checks.

    >>> suite_options({"sticky": True}), suite_options(None)
    ({'sticky': True}, {})

    Raises:
        ConfigError: anything but a mapping of option names to values.
    """
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(name, str) for name in options):
        raise ConfigError(f"env.options must be a mapping of option names to values, got {options!r}")
    return dict(options.items())


def suites() -> dict[str, EnvSuite]:
    """The registered suites by name (a copy: registering goes through :func:`register_suite`)."""
    return dict(_SUITES)


def find_suite(env_name: str, library: str | None = None) -> EnvSuite:
    """The suite that makes ``env_name``: the one named ``library``, or the only one that knows it.

    Raises:
        ConfigError: the library is not registered, the environment is not in it, or (with no
            library) no suite or several suites know the environment.
    """
    if library is not None:
        if library not in _SUITES:
            raise ConfigError(
                f"unknown env library {library!r}: the registered suites are {_listing()} "
                "(a suite of your own: name the module that registers it in env.module)"
            )
        suite = _SUITES[library]
        if suite.knows(env_name):
            return suite
        elsewhere = [other.name for other in _SUITES.values() if other is not suite and other.knows(env_name)]
        if elsewhere:
            raise ConfigError(
                f"environment {env_name!r} is not in library {library!r} but in "
                f"{' and '.join(map(repr, elsewhere))}: set env.library={elsewhere[0]}, or say env={env_name} alone"
            )
        raise ConfigError(
            f"unknown environment {env_name!r} in library {library!r}.{_hint(env_name, suite.names())}"
        )
    knowing = [suite for suite in _SUITES.values() if suite.knows(env_name)]
    if len(knowing) == 1:
        return knowing[0]
    if knowing:
        names = ", ".join(suite.name for suite in knowing)
        raise ConfigError(
            f"environment {env_name!r} is in several env libraries ({names}): set env.library to one"
        )
    raise ConfigError(
        f"unknown environment {env_name!r}: no env library ({_listing()}) has it."
        f"{_hint(env_name, known_names())}"
    )


def known_names() -> list[str]:
    """Every environment name of every registered suite (for suggestions)."""
    return [name for suite in _SUITES.values() for name in suite.names()]


def make_env(name: str, seed: int | None = None, library: str | None = None,
             options: Mapping[str, Any] | None = None) -> EnvBase:
    """Builds one environment with a flat float32 observation.

    Args:
        name: an environment of the suite, e.g. a gymnasium id (``"Pendulum-v1"``) or a
            dm_control task as ``domain-task`` (``"walker-walk"``).
        seed: seed for the environment's random generator.
        library: the suite that makes it (``env.library`` in the configs: ``"gymnasium"``,
            ``"dm_control"``, or a suite of your own). None asks every registered suite.
        options: the suite's options (``env.options``), checked by its
            :meth:`EnvSuite.check_options`.

    Returns:
        A TorchRL environment with ``"observation"`` (float32, 1-D), float32 reward, and the
        running ``"episode_reward"``.

    Raises:
        ConfigError: see :func:`find_suite`; an option the suite does not take, or a bad value.
    """
    suite = find_suite(name, library)
    env = suite.make(name, seed, **suite.check_options(suite_options(options)))
    _check_contract(env, suite.name, name)
    return env


def _check_contract(env: EnvBase, library: str, name: str) -> None:
    problems = []
    observation_spec = env.observation_spec
    if OBSERVATION not in observation_spec.keys():
        problems.append(f'no "{OBSERVATION}"')
    else:
        observation = observation_spec[OBSERVATION]
        event_dims = len(observation.shape) - len(env.batch_size)
        vector = observation.dtype == torch.float32 and event_dims == 1
        frames = observation.dtype == torch.uint8 and event_dims == 3
        if not (vector or frames):
            problems.append(
                f'"{OBSERVATION}" is {observation.dtype} of shape {tuple(observation.shape)}, '
                "neither a flat float32 vector nor uint8 frames [channels, height, width]"
            )
    if EPISODE_REWARD not in observation_spec.keys():
        problems.append(f'no "{EPISODE_REWARD}" (add RewardSum())')
    reward_dtype = env.full_reward_spec[env.reward_key].dtype
    if reward_dtype != torch.float32:
        problems.append(f"the reward is {reward_dtype}, not float32")
    if problems:
        raise TypeError(f"env suite {library!r} made {name!r} with " + "; ".join(problems))


def _listing() -> str:
    return ", ".join(sorted(_SUITES)) or "(none)"


def _hint(name: str, known: list[str]) -> str:
    close = closest(name, known)
    return f" Did you mean: {', '.join(close)}?" if close else ""


def closest(name: str, known: list[str], n: int = 3) -> list[str]:
    """The (up to) ``n`` names of ``known`` closest to ``name``, closest first.

    >>> closest("Acrobot-v2", ["Acrobot-v1", "CartPole-v1", "cheetah-run"])
    ['Acrobot-v1']
    """
    return difflib.get_close_matches(name, list(dict.fromkeys(known)), n=n)


def make_batched_env(name: str, num_envs: int | None, seed: int | None = None,
                     library: str | None = None, evaluation: bool = False,
                     options: Mapping[str, Any] | None = None) -> EnvBase | None:
    """The lean env for ``name`` from its suite, or ``None`` if the suite has no lean path.

    Args:
        name: the environment (as for :func:`actorq.envs.make_env`).
        num_envs: envs in the batch; ``None`` makes one unbatched env.
        seed: the first seed of the chain (env ``i`` gets the ``i``-th).
        library: the suite (``env.library``); ``None`` looks the name up.
        evaluation: the envs evaluation plays (:meth:`EnvSuite.make_raw_for_evaluation`).
        options: the suite's options (``env.options``), as for :func:`make_env`.
    """
    from actorq.envs.batched import LeanBatchedEnv

    suite = find_suite(name, library)
    make_raw = suite.make_raw_for_evaluation if evaluation else suite.make_raw
    raw = make_raw(name, 1 if num_envs is None else num_envs, **suite.check_options(suite_options(options)))
    if raw is None:
        return None
    return LeanBatchedEnv(raw, batched=num_envs is not None, seed=seed)
