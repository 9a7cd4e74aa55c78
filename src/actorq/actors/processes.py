"""How the local actor pool starts its worker processes: forked from a fork server that has
imported torch, TorchRL and actorq once, rather than spawned as fresh interpreters that each
import them again (about 4 s per worker on a 2-core machine, paid by every run of a sweep,
every worker restart and every run a notebook or a test session starts).

TorchRL starts its workers with the process-wide start method, which it sets to ``spawn``
when it is imported; :func:`forked_workers` makes it ``forkserver`` while the pool starts its
workers and puts back what was there after, so the program's own processes start as before.
The fork server lives as long as the process that started it; the workers' parent is the
fork server, not the main process.

The server imports :data:`PRELOAD` when it starts, about 3 s on a 2-core machine, and the
first pool waits for that. :func:`start_fork_server` starts it early, without waiting, so that
a run (``actorq.train``) builds its learner, replay and Trainer meanwhile.

A forked worker has the environment variables the fork server started with;
:func:`in_environment` gives it the main process's, as a spawned worker would have.

Each worker knows its index (:func:`worker_index`, set by the pool before the worker builds
its envs): an env may read it, and the actors' policy records it when the learner asks.

Example:
    >>> import os
    >>> in_environment({**os.environ, "ACTORQ_EXAMPLE": "1"}, lambda: os.environ["ACTORQ_EXAMPLE"])
    '1'
    >>> os.environ.pop("ACTORQ_EXAMPLE")
    '1'
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TypeVar

PRELOAD = ("torch", "tensordict", "torchrl", "actorq.actors.pool")
"""What the fork server imports once, for every worker it forks."""

T = TypeVar("T")

_WORKER_INDEX: int | None = None


def worker_index() -> int | None:
    """The index (``0 .. num_workers - 1``) of the actor worker this process runs, ``None``
    outside actor workers. It is set before the worker builds its envs, so an env may read it.

    Example:
        >>> worker_index() is None  # the learner's process
        True
    """
    return _WORKER_INDEX


def recorded_worker() -> int:
    """What the actors record as the worker of a step: :func:`worker_index`, -1 outside
    actor workers.

    Example:
        >>> recorded_worker()  # the learner's process
        -1
    """
    return -1 if _WORKER_INDEX is None else _WORKER_INDEX


def set_worker_index(index: int | None) -> None:
    """Marks this process as actor worker ``index`` (what :func:`worker_index` returns)."""
    global _WORKER_INDEX
    _WORKER_INDEX = index


def pin_worker(index: int, cores: tuple[int, ...] | None) -> None:
    """Pins this process (actor worker ``index``) to core ``cores[index % len(cores)]`` with one
    torch thread, so that each worker has a core of its own (``actors.cores``); nothing when
    ``cores`` is ``None`` or the platform cannot pin."""
    if not cores or not hasattr(os, "sched_setaffinity"):
        return
    import torch

    os.sched_setaffinity(0, {cores[index % len(cores)]})
    torch.set_num_threads(1)


def check_cores(cores) -> tuple[int, ...] | None:
    """``actors.cores`` as a tuple of core numbers this machine has, or ``None``.

    Raises:
        ConfigError: anything but a non-empty list of distinct core numbers of this machine.
    """
    from actorq.util.errors import ConfigError

    if cores is None:
        return None
    available = list(range(os.cpu_count() or 1))  # not this process's affinity: the learner may be pinned
    numbers = list(cores) if isinstance(cores, Sequence) and not isinstance(cores, str) else None
    if (not numbers or not all(isinstance(core, int) and not isinstance(core, bool) for core in numbers)
            or len(set(numbers)) != len(numbers) or not set(numbers) <= set(available)):
        raise ConfigError(f"actors.cores must be a list of distinct cores of this machine (0..{available[-1]}), "
                          f"got {cores!r}")
    return tuple(numbers)


def start_fork_server() -> None:
    """Starts the fork server (which imports :data:`PRELOAD`) and returns without waiting for
    its imports; nothing where the platform has no fork server or it runs already."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return
    multiprocessing.set_forkserver_preload(list(PRELOAD))  # read when the server starts, once
    multiprocessing.forkserver.ensure_running()


@contextmanager
def forked_workers() -> Iterator[None]:
    """Inside this block, processes start from the fork server (which imports :data:`PRELOAD`
    once) where the platform has one; the process-wide start method is restored after."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        yield
        return
    previous = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_forkserver_preload(list(PRELOAD))  # read when the server starts, once
    multiprocessing.set_start_method("forkserver", force=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(previous, force=True)


def in_environment(environ: Mapping[str, str], make: Callable[[], T]) -> T:
    """``make()`` after setting this process's environment variables to ``environ``."""
    for key in set(os.environ) - set(environ):
        del os.environ[key]
    os.environ.update(environ)
    return make()
