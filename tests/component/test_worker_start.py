"""How the local pool starts its workers: forked by one fork server per process, each with
the main process's environment variables of the moment its pool starts."""

import multiprocessing
import os

import psutil
import pytest

from actorq.actors.base import ActorSpec
from actorq.actors.pool import ActorPool
from tests.component.fault_envs import MARK, ConstantAction


def test_workers_fork_from_one_server_with_the_environment_of_their_start(monkeypatch):
    start_method = multiprocessing.get_start_method(allow_none=True)
    seen = []
    for mark in (1, 2):  # the server may start with the first pool: the second pool's worker is
        monkeypatch.setenv(MARK, str(mark))  # forked after the variable changed
        pool = ActorPool(ActorSpec("where", num_workers=1, frames_per_batch=10, total_frames=10,
                         library="faults"), ConstantAction())
        try:
            seen += [batch["observation"][0].tolist() for batch in pool]
        finally:
            pool.shutdown()
    assert [mark for mark, _ in seen] == [1.0, 2.0]
    parents = {int(parent) for _, parent in seen}
    assert len(parents) == 1 and os.getpid() not in parents  # one server forked both workers
    server = psutil.Process(parents.pop())
    assert server.ppid() == os.getpid() and "multiprocessing.forkserver" in " ".join(server.cmdline())
    assert multiprocessing.get_start_method(allow_none=True) == start_method  # the program's own, put back


def test_workers_run_pinned_to_the_cores_given():
    core = max(os.sched_getaffinity(0))  # not the learner's core 0, where this machine has two
    pool = ActorPool(ActorSpec("where", num_workers=1, frames_per_batch=10, total_frames=10, library="faults",
                               cores=(core,)), ConstantAction())
    try:
        next(iter(pool))  # the worker has built its collector, and pinned itself first
        assert [psutil.Process(process.pid).cpu_affinity() for process in pool.collector.procs] == [[core]]
    finally:
        pool.shutdown()


def test_cores_the_machine_lacks_are_refused_in_one_line():
    from actorq.actors.processes import check_cores
    from actorq.util.errors import ConfigError

    assert check_cores(None) is None and check_cores([0]) == (0,)
    for bad in ([], [0, 0], [10_000], ["0"], 3):
        with pytest.raises(ConfigError, match="actors.cores must be a list of distinct cores of this machine"):
            check_cores(bad)
