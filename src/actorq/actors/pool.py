"""Actors: TorchRL collectors in worker processes, each running an :class:`ExplorationPolicy`.

The collectors' TorchRL machinery is reached through :mod:`actorq.util.torchrl_adapter`.

Example:
    >>> from actorq.actors.policy import ExplorationPolicy
    >>> from actorq.envs import EnvSpec
    >>> from actorq.algos.networks import QNetwork
    >>> from actorq.actors.base import ActorSpec
    >>> env_spec = EnvSpec(obs_dim=4, discrete=True, num_actions=2)
    >>> policy = ExplorationPolicy(QNetwork(env_spec, (16,)), env_spec, noise_scale=0.1)
    >>> pool = ActorPool(ActorSpec("CartPole-v1", num_workers=1, frames_per_batch=100, total_frames=300), policy)
    >>> try:
    ...     shapes = [tuple(batch.shape) for batch in pool]  # one TensorDict of steps per batch
    ...     pool.push(policy)  # copies the policy's parameters and buffers into every worker
    ... finally:
    ...     pool.shutdown()
    >>> shapes
    [(100,), (100,), (100,)]

With a ``writer`` (an :class:`~actorq.data.writer.TransitionWriter` over a shared
replay) the workers store their batches themselves and iteration yields :data:`WRITTEN`
once per batch written (``tests/component/test_replay_in_training.py`` runs it).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, NoReturn

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torchrl.collectors import Collector

from actorq.util import torchrl_adapter as adapter
from actorq.actors.base import ActorPoolBase, ActorSpec, gather_rounds, merge_rows
from actorq.actors.base import ActorWorkerError, check_frames_done, make_worker_env  # noqa: F401  (imported from here too)
from actorq.actors.processes import forked_workers, in_environment
from actorq.actors.processes import pin_worker, set_worker_index, worker_index  # noqa: F401  (imported from here too)
from actorq.actors.rollout import LeanCollector

if TYPE_CHECKING:
    from actorq.data.writer import TransitionWriter

log = logging.getLogger(__name__)

ACK_TIMEOUT_S = 60.0
"""How long :meth:`ActorPool.push` waits for a live worker to take new weights."""

DRAIN_TIMEOUT_S = 10.0
"""How long a restart waits for the live workers to finish the batches they are collecting."""


class Written:
    """What :class:`ActorPool` yields for a batch that a worker wrote into the replay itself.

    Lightning skips ``training_step`` for a ``None`` batch (what TorchRL collectors yield
    then), so the pool yields this marker instead.
    """

    def __repr__(self) -> str:
        return "WRITTEN"


WRITTEN = Written()


class _WorkerFailed(Exception):
    """Raised in the learner's process when a worker is found dead; ``batch`` is one that had
    just arrived (from worker ``batch_worker``, which then waits for a go-ahead it will not
    get) or ``None``."""

    def __init__(self, worker: int, cause: str, batch: TensorDictBase | None = None):
        super().__init__(f"worker {worker}: {cause}")
        self.worker, self.cause, self.batch = worker, cause, batch
        self.batch_worker: int | None = None


class _ReportingCollector(LeanCollector):
    """The collector inside one worker process: TorchRL's own (with the lean rollout of
    :class:`~actorq.actors.rollout.LeanCollector`), plus two reports to the
    learner's process: the frames of every batch it collected (``produced[worker]``, written
    before the hand-over) and the exception that ends the worker (``errors``)."""

    produced: torch.Tensor
    errors: multiprocessing.Queue

    def iterator(self) -> Iterator[TensorDictBase]:
        try:
            for batch in super().iterator():
                if batch is not None:
                    self.produced[self.worker_idx] += batch.numel()
                yield batch
        except Exception as error:
            self.errors.put((self.worker_idx, f"{type(error).__name__}: {error}"))
            raise


class _WorkerCollectorFactory:
    """TorchRL's ``collector_class`` hook: builds each worker's :class:`_ReportingCollector`
    in the worker process (TorchRL calls it with the worker's index) and records that index
    for :func:`worker_index`."""

    def __init__(self, produced: torch.Tensor, errors: multiprocessing.Queue, lean_rollout: bool,
                 cores: tuple[int, ...] | None = None):
        self.produced, self.errors, self.lean_rollout, self.cores = produced, errors, lean_rollout, cores

    def __call__(self, *args, **kwargs) -> Collector:
        set_worker_index(kwargs.get("worker_idx"))
        pin_worker(kwargs.get("worker_idx") or 0, self.cores)
        adapter.skip_worker_poll_wait()
        adapter.hand_on_ignore_rb(self, _ReportingCollector)
        collector = _ReportingCollector(*args, **kwargs)
        collector.produced, collector.errors = self.produced, self.errors
        collector.lean_rollout = self.lean_rollout
        return collector


class _Collector(adapter.HandOverCollector):
    """TorchRL 0.14's ``MultiAsyncCollector`` with what a pool that loses nothing and never
    hangs needs, through the hooks of :class:`~actorq.util.torchrl_adapter.HandOverCollector`.

    - Hand-over: TorchRL's queue of batches holds ONE item (``_queue_len``), and a worker
      whose ``queue_out.put(..., timeout=1.0)`` times out throws its batch away and collects
      another (``torchrl/collectors/_runner.py``, the ``except queue.Full`` branches). A
      worker hands over at most one batch and then waits for the learner's "continue", so a
      queue of ``num_workers`` items never fills and no put ever times out.
    - Accounting: every batch a worker collected is counted in ``produced[worker]`` before
      its hand-over, and a worker collects nothing more until it hears back, so when a batch
      arrives, ``produced[worker]`` minus what arrived from it is what it dropped.
    - Liveness: while waiting for a batch, and after receiving one, the workers are checked;
      a dead one raises :class:`_WorkerFailed` naming it and its cause (the exception its
      env raised, or the signal that killed it).
    """

    def __init__(self, *args, produced: torch.Tensor, errors: multiprocessing.Queue, lean_rollout: bool = True,
                 cores: tuple[int, ...] | None = None, **kwargs):
        self.produced, self.errors = produced, errors  # first: a failed start shuts down
        super().__init__(*args, collector_class=_WorkerCollectorFactory(produced, errors, lean_rollout, cores),
                         **kwargs)
        self.accounted = [0] * self.num_workers  # produced[w] when w's last batch arrived
        self.received_frames = [0] * self.num_workers
        self.dropped_frames = 0
        self.causes: dict[int, str] = {}

    # A failed worker does not shut the collector down at once: the pool first takes the
    # batches the other workers hold (:meth:`drain`), then shuts it down itself.
    raised_without_shutdown = (_WorkerFailed,)

    def nothing_arrived(self) -> None:
        self.check_workers()

    def unreadable_batch(self, error: BaseException, wait_s: float = 5.0) -> NoReturn:
        """Raises :class:`_WorkerFailed` for the worker whose death made a batch unreadable
        (its exit is seen a moment after its connection breaks), or ``error`` if none died.
        The batch is counted as dropped (its worker had counted it as produced)."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            self.check_workers()
            time.sleep(0.05)
        raise error

    def batch_arrived(self, worker: int, batch: TensorDictBase | None) -> None:
        self._account(worker, batch)
        try:
            self.check_workers()
        except _WorkerFailed as failure:
            failure.batch, failure.batch_worker = batch, worker
            raise

    def _account(self, idx: int, out: TensorDictBase | None) -> None:
        """Counts a batch that arrived from worker ``idx``, and what that worker dropped."""
        frames = out.numel() if out is not None else self.frames_per_batch_worker()
        produced = int(self.produced[idx])
        if self.replay_buffer is None:  # a worker that writes itself stored it before announcing
            self.dropped_frames += max(0, produced - self.accounted[idx] - frames)
        self.accounted[idx] = produced
        self.received_frames[idx] += frames

    def drain(self, failure: _WorkerFailed, timeout: float = DRAIN_TIMEOUT_S) -> list[TensorDictBase]:
        """The batches the other workers hold when ``failure.worker`` failed: those already in
        the hand-over queue and, waiting up to ``timeout``, those they are still collecting
        (every worker but the one whose batch came with the failure had its go-ahead), each
        accounted as usual. Without it a restart threw these complete batches away. The
        failed worker's own batch in progress is lost (it was never a batch)."""
        collecting = getattr(self, "running", False)  # False: no worker had a go-ahead yet
        waiting = {worker for worker, process in enumerate(self.procs)
                   if collecting and worker not in (failure.worker, failure.batch_worker)
                   and _is_running(process)}
        deadline = time.monotonic() + timeout
        batches = []
        while True:
            try:
                idx, out = self.take_batch(timeout=0.1)
            except (queue.Empty, TimeoutError):
                waiting = {worker for worker in waiting if _is_running(self.procs[worker])}
                if not waiting or time.monotonic() > deadline:
                    return batches
                continue
            except Exception:  # noqa: BLE001  (a dead worker's hand-over cannot be read: dropped)
                return batches
            self._account(idx, out)
            batches.append(out)
            waiting.discard(idx)

    def check_workers(self) -> None:
        """Raises :class:`_WorkerFailed` for the first worker that reported an exception (its
        process takes seconds to exit: TorchRL's shutdown in it waits for its weight-receiver
        thread) or is dead."""
        self._read_errors(wait=0.0)
        for worker in sorted(self.causes):
            raise _WorkerFailed(worker, self.causes[worker])
        for worker, process in enumerate(self.procs):
            if _has_died(process):
                raise _WorkerFailed(worker, self.cause(worker, process.exitcode))

    def cause(self, worker: int, exitcode: int | None) -> str:
        """What ended ``worker``: the exception it reported, else its signal or exit code."""
        self._read_errors(wait=0.2)
        if worker in self.causes:
            return self.causes[worker]
        if exitcode is not None and exitcode < 0:
            return f"killed by signal {signal.Signals(-exitcode).name}"
        return f"exited with code {exitcode}"

    def _read_errors(self, wait: float) -> None:
        while True:
            try:
                reporter, message = self.errors.get(timeout=wait) if wait else self.errors.get_nowait()
            except (queue.Empty, OSError, ValueError):
                return
            self.causes.setdefault(reporter, message)

    def in_flight_frames(self) -> int:
        """Frames the workers collected that have not arrived (lost if the pool stops now)."""
        return sum(int(self.produced[w]) - self.accounted[w] for w in range(self.num_workers))

    def shutdown(self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True) -> None:
        try:
            super().shutdown(timeout=timeout, close_env=close_env, raise_on_error=raise_on_error)
        finally:
            self.errors.close()

    def push(self, weights: TensorDictBase, timeout: float = ACK_TIMEOUT_S) -> None:
        """TorchRL's weight push waits for every worker's acknowledgement with no timeout
        (``SharedMemWeightSyncScheme.send`` -> ``_wait_for_ack(timeout=None)``), so a dead
        worker hangs it. Here the send does not wait, and the acknowledgements are awaited
        worker by worker while checking that the worker is alive."""
        self.check_workers()
        self.send_weights(weights)
        for worker, process in enumerate(self.procs):
            started = time.monotonic()
            while not self.wait_for_weights(worker, timeout=0.1):
                if not process.is_alive():
                    raise _WorkerFailed(worker, self.cause(worker, process.exitcode))
                if time.monotonic() - started > timeout:
                    raise _WorkerFailed(worker, f"took no weights within {timeout:.0f} s (alive but stuck)")


class _Receiver:
    """Takes the workers' batches from the collector on a thread of its own, up to ``depth``
    ahead of the learner.

    A worker hands over one batch, then waits for its go-ahead, which the collector sends
    when the batch is taken. Taken by the learner's loop, that waits for the learner's update,
    logging and callbacks of the batch before (Lightning fetches one ahead), so a learner step
    longer than a batch held the worker up. Here the thread takes each batch as it arrives;
    the worker waits only when ``depth`` batches wait for the learner.

    The collector's own exceptions (a failed worker included) come out of :meth:`next`, after
    the thread has ended, so the pool recovers with no thread reading the collector.
    """

    def __init__(self, batches: Iterator[TensorDictBase | None], depth: int):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(batches,), name="actorq-receiver", daemon=True)
        self._thread.start()

    def _run(self, batches: Iterator[TensorDictBase | None]) -> None:
        try:
            for batch in batches:
                if not self._hand(("batch", batch)):
                    return
        except BaseException as error:  # noqa: BLE001  (raised again in the learner's thread)
            self._hand(("error", error))
            return
        self._hand(("end", None))

    def _hand(self, item: tuple[str, object]) -> bool:
        """Queues ``item`` for the learner; ``False`` once :meth:`close` was called."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def next(self) -> TensorDictBase | None:
        """The next batch; ``StopIteration`` at the end; the collector's exception, raised."""
        kind, item = self._queue.get()
        if kind == "batch":
            return item
        self._thread.join()
        if kind == "end":
            raise StopIteration
        raise item

    def close(self, timeout: float = 5.0) -> None:
        """Stops the thread: it ends once its current wait for a batch ends (within
        ``timeout``; a thread still waiting then is left to end with the collector)."""
        self._stop.set()
        self._thread.join(timeout)


class _Direct:
    """The workers' batches taken by the learner itself (``waiting_batches=0``): a worker's
    go-ahead for its next batch goes out when the learner takes this one, so it collects the
    next batch while the learner trains on this one, with the weights pushed last, and a
    batch lags the learner by one policy version. (With a :class:`_Receiver`, the batch on
    its thread and those waiting in its queue each add one.)"""

    def __init__(self, batches: Iterator[TensorDictBase | None]):
        self._batches = batches

    def next(self) -> TensorDictBase | None:
        return next(self._batches)

    def close(self, timeout: float = 5.0) -> None:
        """Nothing runs on a thread of its own."""


def _is_running(process: multiprocessing.Process) -> bool:
    """Whether ``process`` runs (a closed process object does not: ``is_alive`` refuses it)."""
    try:
        return process.is_alive()
    except ValueError:
        return False


def _has_died(process: multiprocessing.Process) -> bool:
    """Whether ``process`` ended and its process object is still open (it has an exit code)."""
    try:
        return not process.is_alive()
    except ValueError:
        return False


class ActorPool(ActorPoolBase):
    """``num_workers`` actor processes collecting concurrently with the learner.

    Iterating yields one worker's batch at a time (``frames_per_batch`` steps), while that
    worker already collects its next batch. Weights reach the workers through :meth:`push`.

    Every batch a worker collects reaches the iteration (TorchRL's default hand-over drops a
    batch that waits more than a second; see :class:`_Collector`); what is lost anyway (the
    batches in flight when a failed pool restarts) is counted in :attr:`dropped_frames`.

    A worker that dies (killed, or its env raised) is noticed within about a second, by the
    iteration or by :meth:`push`. With ``restart_on_failure`` the pool then restarts all its
    workers with the last pushed weights (counted in :attr:`restarts`) and goes on, up to
    ``max_restarts`` times; otherwise, or beyond that, it stops its workers and raises
    :class:`ActorWorkerError` naming the worker and the cause.

    With ``spec.collection == "lockstep"`` the pool collects rounds instead: every worker
    collects one batch with the weights pushed last, the iteration yields the round as one
    batch ``[envs, T]``, and the next round starts when the next batch is asked for, after
    the learner trained and pushed. A worker that fails mid-round loses the round (counted in
    :attr:`dropped_frames`).

    Args:
        spec: what to collect (:class:`~actorq.actors.base.ActorSpec`).
        policy: the actor-side policy; a copy lives in every worker.
        writer: when given, each worker writes its batches through it (an
            :class:`~actorq.data.writer.TransitionWriter` over a shared replay) and
            iteration yields :data:`WRITTEN` for each batch written, until ``total_frames``
            frames have been written.
        lean_rollout: collect from a lean batched env with the lean rollout
            (:class:`~actorq.actors.rollout.LeanCollector`); ``False`` keeps TorchRL's.

    Attributes:
        frames: frames yielded so far (or, with a ``writer``, announced as written),
            counting a resumed run's ``frames_done``.
        collected_frames: frames the workers collected since the pool started, through every
            restart (what reached the iteration plus what was dropped; with a ``writer``,
            what the workers wrote).
        dropped_frames: frames the workers collected that never reached the iteration.
        unused_frames: frames the workers collected that the run did not need: the batches
            the other workers finished after the frame budget was met (read once the
            iteration ended; during it, also the batches on their way). So
            ``collected_frames == frames - frames_done + dropped_frames + unused_frames``.
        restarts: how many times the workers were restarted after a failure.
    """

    def __init__(self, spec: ActorSpec, policy: nn.Module, writer: TransitionWriter | None = None,
                 lean_rollout: bool = True):
        super().__init__(spec, policy)
        self.lean_rollout = lean_rollout
        self.writer = writer
        self._dropped_before = 0  # by collectors that were replaced
        self._collected_before = 0  # by collectors that were replaced
        self._unused_before = 0  # saved at a restart but past the budget
        self._receiver: _Receiver | _Direct | None = None
        self.collector = self._start(spec.total_frames - spec.frames_done)

    def _start(self, total_frames: int) -> _Collector:
        context = multiprocessing.get_context("spawn")
        env_fn = partial(in_environment, dict(os.environ), self.env_fn)
        with forked_workers():
            collector = _Collector(
                [env_fn] * self.spec.num_workers,
                self.policy,
                frames_per_batch=self.spec.frames_per_batch,
                total_frames=total_frames,
                init_random_frames=max(0, self.spec.init_random_frames - self.frames),
                split_trajs=False,
                replay_buffer=self.writer,
                produced=torch.zeros(self.spec.num_workers, dtype=torch.int64).share_memory_(),
                errors=context.Queue(),
                lean_rollout=self.lean_rollout,
                cores=self.spec.cores,
            )
        collector.set_seed(self.restart_seed)
        self.collector = collector
        if self._weights is not None:
            collector.push(self._weights)
        return collector

    @property
    def dropped_frames(self) -> int:
        return self._dropped_before + self.collector.dropped_frames

    @property
    def collected_frames(self) -> int:
        if self.writer is not None:  # each worker writes what it collects
            return self.writer.write_count
        return self._collected_before + int(self.collector.produced.sum())

    @property
    def unused_frames(self) -> int:
        if self.writer is not None:
            return 0
        return self._unused_before + self.collector.in_flight_frames()

    def _receive(self) -> _Receiver | _Direct:
        self._close_receiver()
        depth = self.spec.num_workers if self.spec.waiting_batches is None else self.spec.waiting_batches
        self._receiver = _Receiver(iter(self.collector), depth) if depth else _Direct(iter(self.collector))
        return self._receiver

    def _close_receiver(self) -> None:
        if self._receiver is not None:
            self._receiver.close()
            self._receiver = None

    def __iter__(self) -> Iterator[TensorDictBase | Written]:
        if self.spec.collection == "lockstep":
            yield from self._lockstep()
        elif self.spec.gather > 1:
            yield from gather_rounds(self._asynchronous(), self.spec.gather)
        else:
            yield from self._asynchronous()

    def _asynchronous(self) -> Iterator[TensorDictBase | Written]:
        """Each worker's batch as it arrives (:meth:`__iter__`)."""
        batches = self._receive()
        while True:
            try:
                batch = batches.next()
            except StopIteration:
                return
            except Exception as error:
                saved = self._recover_from(error)
                batches = self._receive()
                for batch in saved:  # what the old workers had collected, before any new batch
                    if self.frames >= self.spec.total_frames:
                        self._unused_before += batch.numel()  # past the budget, as at a normal end
                        continue
                    self.frames += batch.numel()
                    yield batch
                if self.writer is None and self.frames >= self.spec.total_frames:
                    return
                continue
            if batch is not None:
                self.frames += batch.numel()
                yield batch
            else:
                # Written by a worker: the frame budget counts what was written.
                self.frames += self.spec.frames_per_batch
                last = self.writer.write_count >= self.spec.total_frames - self.spec.frames_done  # written since the resume
                yield WRITTEN
                if last:
                    return
            if self.frames >= self.spec.total_frames and self.writer is None:
                return

    def _lockstep(self) -> Iterator[TensorDictBase | Written]:
        """Rounds of every worker's batch, each yielded as one batch (:meth:`__iter__`)."""
        rounds = self.collector.rounds()
        while self.frames < self.spec.total_frames:
            try:
                batches = next(rounds)
            except StopIteration:
                return
            except Exception as error:
                saved = self._recover_from(error)
                self._dropped_before += sum(batch.numel() for batch in saved)  # a round is whole or lost
                rounds = self.collector.rounds()
                continue
            self.frames += self.spec.batch_frames
            yield WRITTEN if self.writer is not None else merge_rows(batches)

    def _recover_from(self, error: Exception) -> list[TensorDictBase]:
        """Restarts the workers after ``error`` if it reports a failed worker (or raises it,
        or :class:`ActorWorkerError` when no restart is left); returns what :meth:`_recover`
        saved."""
        failure = _as_worker_failure(error, self.collector)
        if failure is None:
            raise error
        return self._recover(failure)

    def _recover(self, failure: _WorkerFailed) -> list[TensorDictBase]:
        """Stops the failed collector and restarts it with the last pushed weights (or raises);
        returns the complete batches the old workers held (the one that came with the failure
        first), for the iteration to yield."""
        self._close_receiver()  # no thread may read the old collector from here on
        old = self.collector
        process = old.procs[failure.worker]
        if _is_running(process):  # its env raised; it cannot answer "close"
            process.kill()
        restart = self.can_restart
        if restart:  # said now: taking the others' batches and stopping the old workers takes seconds
            log.warning("actor worker %d failed (%s); restarting the %d actor workers with the current "
                        "weights (restart %d of at most %d)", failure.worker, failure.cause, self.spec.num_workers,
                        self.restarts + 1, self.spec.max_restarts)
        saved = [failure.batch] if failure.batch is not None else []
        if restart and self.writer is None:  # a worker writing itself stored its batches already
            saved += old.drain(failure)
        old.shutdown(timeout=5.0, raise_on_error=False)
        # Counted once the old workers are stopped, so that none adds a batch afterwards.
        if self.writer is None:
            self._dropped_before += old.in_flight_frames()
        self._dropped_before += old.dropped_frames
        old.dropped_frames = 0
        self._collected_before += int(old.produced.sum())
        self.refuse_restart(failure.worker, failure.cause)
        if self.writer is not None:
            remaining = self.spec.total_frames - self.spec.frames_done - self.writer.write_count
        else:
            remaining = self.spec.total_frames - self.frames - sum(batch.numel() for batch in saved)
        self.restarts += 1
        try:
            self._start(max(remaining, self.spec.frames_per_batch))
        except _WorkerFailed as again:  # a fresh worker died before it took the weights
            saved += self._recover(again)
        return saved

    def push(self, policy: nn.Module) -> None:
        """Copies ``policy``'s parameters and buffers into every worker's policy.

        Returns once every worker has them. A dead worker does not hang it: with
        ``restart_on_failure`` the weights are kept for the restart, which the iteration
        does; otherwise :class:`ActorWorkerError` is raised.
        """
        # Not a copy: the actors' policy changes only when the next push loads new weights,
        # which replace these as the ones a restart starts from.
        weights = TensorDict({"module": TensorDict.from_module(policy)}, batch_size=[])
        self._weights = weights
        try:
            self.collector.push(weights)
        except _WorkerFailed as failure:
            if not self.can_restart:
                self._recover(failure)  # raises ActorWorkerError
            # else the iteration finds the dead worker and restarts with these weights

    def shutdown(self) -> None:
        self._close_receiver()
        self.collector.shutdown(raise_on_error=False)


def _as_worker_failure(error: BaseException, collector: _Collector) -> _WorkerFailed | None:
    """Our own report of a dead worker, or TorchRL's (when it noticed first), else None."""
    if isinstance(error, _WorkerFailed):
        return error
    failed = adapter.failed_worker(error)
    if failed is None:
        return None
    worker, exitcode = failed
    return _WorkerFailed(worker, collector.cause(worker, exitcode))
