"""Nothing lost, nothing hung: real actor workers with a slow learner, a killed worker and an
env that raises on a chosen worker at a chosen step (``tests/component/fault_envs.py``)."""

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch

from actorq.actors.base import ActorSpec
from actorq.actors.pool import ActorPool, ActorWorkerError
from actorq.envs import register_suite, suites, unregister_suite
from tests.component.fault_envs import ConstantAction, FaultSuite
from tests.helpers import is_service

# A failure is noticed well under a second on a quiet machine (measured 0.1-2 s); 4.1 s was
# seen on a 2-core machine at load 4. The bound still fails a pool that only notices at the
# next push or the 60 s acknowledgement timeout. The restart's warning is logged when the
# failure is noticed, before the seconds spent taking the other workers' batches and stopping
# the old ones (logged after them, it once came 15.6 s after the kill in CI).
DETECTION_BOUND_S = 10.0

@pytest.fixture(autouse=True, scope="module")
def fault_suite():
    """The fault suite for this module's tests only: other tests list the registered suites."""
    if FaultSuite.name not in suites():
        register_suite(FaultSuite)
    yield
    unregister_suite(FaultSuite.name)


@pytest.fixture
def no_stray_workers():
    """Fails a test that leaves a process behind, and kills what it left (so a failing test
    leaves nothing either). Python's resource tracker, started once per process, is not a
    worker."""
    me = psutil.Process()
    before = {child.pid for child in me.children(recursive=True)}
    yield
    time.sleep(0.2)
    left = [child for child in me.children(recursive=True) if child.pid not in before and not is_service(child)]
    for child in left:
        child.kill()
    psutil.wait_procs(left, timeout=5)
    assert left == [], f"actor processes left behind: {[child.pid for child in left]}"


def worker_steps(batch: torch.Tensor) -> tuple[int, list[int]]:
    """(worker, env steps) of a batch of the "count" env."""
    workers = batch["observation"][:, 0].long().unique().tolist()
    assert len(workers) == 1
    return workers[0], batch["observation"][:, 1].long().tolist()


def push_within(pool: ActorPool, policy: torch.nn.Module, seconds: float) -> BaseException | None:
    """Runs ``pool.push(policy)``; fails the test if it has not returned after ``seconds``."""
    outcome: list[BaseException | None] = []

    def push():
        try:
            pool.push(policy)
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001  (handed to the test)
            outcome.append(error)

    thread = threading.Thread(target=push, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"push() did not return within {seconds} s"
    return outcome[0]


@pytest.mark.timeout(120)
def test_a_slow_learner_loses_no_batch_of_any_worker(no_stray_workers):
    """TorchRL's hand-over drops a batch that waits over 1 s; with two workers and a learner
    taking 1.3 s per batch every other batch was lost. Each worker's env counts its steps,
    so the frames that arrive must be steps 0, 1, 2, ... of each worker with no gap."""
    pool = ActorPool(ActorSpec("count", num_workers=2, frames_per_batch=100, total_frames=400, library="faults"),
                     ConstantAction())
    steps: dict[int, list[int]] = {}
    try:
        for batch in pool:
            worker, batch_steps = worker_steps(batch)
            steps.setdefault(worker, []).extend(batch_steps)
            time.sleep(1.3)  # a slow learner step
    finally:
        pool.shutdown()
    assert sorted(steps) == [0, 1]
    assert all(got == list(range(len(got))) for got in steps.values()), {w: s[::100] for w, s in steps.items()}
    assert pool.frames == sum(map(len, steps.values())) == 400
    assert pool.dropped_frames == 0 and pool.restarts == 0


@pytest.mark.timeout(120)
def test_a_killed_worker_is_restarted_with_the_current_weights(no_stray_workers, caplog):
    """SIGKILL of a worker: the next push returns at once, the death is noticed within
    seconds, every worker restarts with the weights pushed last, the frame budget is met."""
    policy = ConstantAction(1.0)
    pool = ActorPool(ActorSpec("count", num_workers=2, frames_per_batch=50, total_frames=800, library="faults",
                     max_restarts=2), policy)
    actions_after_restart, first_pids, killed_at = [], None, None
    try:
        with caplog.at_level(logging.WARNING, logger="actorq.actors.pool"):
            for index, batch in enumerate(pool):
                if pool.restarts:
                    actions_after_restart.append(batch["action"])
                if index == 1:
                    first_pids = [process.pid for process in pool.collector.procs]
                    os.kill(first_pids[0], signal.SIGKILL)
                    killed_at = time.time()
                    # Another module, so that the workers can get 7 only from the push.
                    assert push_within(pool, ConstantAction(7.0), seconds=10) is None
    finally:
        pool.shutdown()
    assert pool.restarts == 1
    [record] = [r for r in caplog.records if "restarting" in r.getMessage()]
    assert "actor worker 0 failed (killed by signal SIGKILL)" in record.getMessage()
    assert record.created - killed_at < DETECTION_BOUND_S, f"noticed after {record.created - killed_at:.1f} s"
    # The restart keeps the batches the surviving worker had collected and yields them first,
    # with the weights that worker had then (1 or 7); every later batch runs the weights
    # pushed last.
    values = [a.unique().tolist() for a in actions_after_restart]
    stale = [i for i, v in enumerate(values) if v != [7.0]]
    assert stale == list(range(len(stale))), values  # kept batches only, which come first
    assert all(values[i] == [1.0] for i in stale), values
    assert len(values) - len(stale) >= 8, values
    assert pool.frames == 800
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in first_pids)


@pytest.mark.timeout(120)
def test_a_worker_killed_while_its_first_batch_waits_is_restarted(no_stray_workers, caplog):
    """A worker's first batch carries its data, which the learner reads through that worker's
    process. Worker 0 stalls at its first step while worker 1 fills the hand-over, so worker
    0's first batch waits unread; killed then, that batch cannot be read. It once ended the
    run with ``ConnectionResetError`` (seen in CI under load); now it is a worker failure:
    the batch counts as dropped, the workers restart, the budget is met."""
    pool = ActorPool(ActorSpec("stall-w0-s0", num_workers=2, frames_per_batch=50, total_frames=800,
                               library="faults", max_restarts=1), ConstantAction())
    try:
        with caplog.at_level(logging.WARNING, logger="actorq.actors.pool"):
            for index, _ in enumerate(pool):
                if index == 0:
                    deadline = time.monotonic() + 60
                    while int(pool.collector.produced[0]) < 50 and time.monotonic() < deadline:
                        time.sleep(0.1)
                    time.sleep(1.0)  # its hand-over is done; the receiver, full, does not read it
                    os.kill(pool.collector.procs[0].pid, signal.SIGKILL)
    finally:
        pool.shutdown()
    [record] = [r for r in caplog.records if "restarting" in r.getMessage()]
    assert "actor worker 0 failed (killed by signal SIGKILL)" in record.getMessage()
    assert pool.restarts == 1
    assert pool.dropped_frames == 50
    assert pool.frames == 800


@pytest.mark.timeout(120)
def test_a_restart_keeps_the_batches_the_other_workers_collected(no_stray_workers):
    """Three workers behind a slow learner, so the others' batches wait in the hand-over
    queue when one is killed. A restart used to throw those complete batches away (counted
    in ``dropped_frames``); now they reach the iteration: nothing is dropped, each worker's
    steps arrive as 0, 1, 2, ... from each of its envs (the restarted ones count from 0
    again), and every collected frame is accounted for."""
    pool = ActorPool(ActorSpec("count", num_workers=3, frames_per_batch=50, total_frames=1500, library="faults"),
                     ConstantAction())
    steps: dict[int, list[int]] = {}
    try:
        for index, batch in enumerate(pool):
            worker, batch_steps = worker_steps(batch)
            steps.setdefault(worker, []).extend(batch_steps)
            if index == 3:
                os.kill(pool.collector.procs[0].pid, signal.SIGKILL)
            time.sleep(0.3)  # a slow learner step: the other workers' batches wait meanwhile
    finally:
        pool.shutdown()
    assert pool.restarts == 1
    assert pool.dropped_frames == 0
    assert pool.frames == sum(map(len, steps.values())) == 1500
    assert pool.collected_frames == pool.frames + pool.dropped_frames + pool.unused_frames
    assert pool.unused_frames <= 3 * 50  # at most one batch per worker, finished past the budget
    for worker, got in steps.items():
        restarts_at = [i for i, step in enumerate(got) if step == 0]
        assert restarts_at in ([0], [0, restarts_at[-1]]), (worker, restarts_at)
        for start, end in zip(restarts_at, [*restarts_at[1:], len(got)]):
            assert got[start:end] == list(range(end - start)), (worker, got[start:end:50])


DEAD_WORKER_PUSH = """
import os, signal

from actorq.actors.base import ActorSpec
from actorq.actors.pool import ActorPool
from tests.component.fault_envs import ConstantAction


def test_push_to_a_dead_worker():
    policy = ConstantAction(1.0)
    pool = ActorPool(ActorSpec("count", num_workers=2, frames_per_batch=50, total_frames=10_000,
                               library="faults", restart_on_failure=False), policy)
    next(iter(pool))
    print("WORKERS", *[process.pid for process in pool.collector.procs], flush=True)
    process = pool.collector.procs[1]
    os.kill(process.pid, signal.SIGKILL)
    process.join(5)
    pool.push(policy)  # raises: the test fails, and its report keeps the pool until exit
"""


@pytest.mark.timeout(120)
def test_a_push_to_a_dead_worker_fails_and_the_process_exits(tmp_path):
    """TorchRL's push waits for every worker's acknowledgement without a timeout; here it
    raises. Run as a failing test in a pytest of its own: TorchRL's weight-sync scheme, kept
    alive by the failure report until the interpreter exits, hung that exit (its ``__del__``
    starts a queue thread then) unless the pool had shut it down. No worker may be left."""
    (tmp_path / "test_dead_worker_push.py").write_text(DEAD_WORKER_PUSH)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                            "--rootdir", str(tmp_path), "test_dead_worker_push.py"],
                           cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, start_new_session=True)
    try:
        output, _ = run.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)  # the run and its workers
        output, _ = run.communicate()
        pytest.fail(f"the process did not exit within 60 s:\n{output[-3000:]}")
    finally:
        pids = next((line.split()[1:] for line in (output or "").splitlines() if line.startswith("WORKERS")), [])
        workers = [psutil.Process(int(pid)) for pid in pids if psutil.pid_exists(int(pid))]
        for worker in workers:
            worker.kill()
    assert run.returncode == 1, output[-3000:]
    assert ("ActorWorkerError: actor worker 1 failed: killed by signal SIGKILL "
            "(actors.restart_on_failure=false)") in output
    assert len(pids) == 2 and workers == [], "actor processes outlived the run"


@pytest.mark.timeout(120)
def test_an_env_that_raises_restarts_its_pool_then_stops_it(no_stray_workers, caplog):
    """RLlib-style fault injection: the env of worker 1 raises at its step 120. Its process
    takes seconds to exit after the exception (TorchRL waits for its weight-receiver thread),
    so the worker reports the exception itself. The first failure restarts the workers; the
    same fault again, past ``max_restarts=1``, stops the run with the worker and the
    exception named."""
    pool = ActorPool(ActorSpec("fail-w1-s120", num_workers=2, frames_per_batch=50, total_frames=10_000,
                     library="faults", max_restarts=1), ConstantAction())
    started = time.time()
    steps: dict[int, list[int]] = {}
    last_from_1 = None  # when worker 1's last batch before its fault arrived
    try:
        with pytest.raises(ActorWorkerError) as error, caplog.at_level(logging.WARNING, "actorq.actors.pool"):
            for batch in pool:
                worker, batch_steps = worker_steps(batch)
                steps.setdefault(worker, []).extend(batch_steps)
                if worker == 1 and not pool.restarts:
                    last_from_1 = time.time()
    finally:
        pool.shutdown()
    # Worker 1 raises right after its batch of steps 50-99 arrives (its env is instant), and
    # the pool hears of it at once (well under a second on a quiet machine): the dying process
    # itself lingers for seconds.
    [record] = [r for r in caplog.records if "restarting" in r.getMessage()]
    assert record.created - last_from_1 < DETECTION_BOUND_S, f"noticed after {record.created - last_from_1:.1f} s"
    assert error.value.worker == 1 and error.value.cause == "RuntimeError: injected fault at step 120"
    assert str(error.value).endswith("(after 1 restarts; actors.max_restarts=1)")
    assert pool.restarts == 1
    assert time.time() - started < 40
    assert max(steps[1]) < 120  # worker 1 never got past its fault
