"""The boundary to TorchRL's collector machinery: every private member of TorchRL (and of
tensordict) that actorq touches is touched here, and only here.

The actor pools (:mod:`actorq.actors.pool`), the lean rollout (:mod:`actorq.actors.rollout`)
and the lean batched env (:mod:`actorq.envs.batched`) call the small functions below instead.
:data:`PRIVATE_MEMBERS` lists each private member with why it is needed and what public API
would replace it; ``tests/unit/test_torchrl_adapter.py`` checks every one of them on the
installed versions (so an upgrade that renames one fails there, by name), and that no module
outside this one reaches a private TorchRL member.

Example:
    >>> next_seed(0) != 0  # SerialEnv's seed chain, as the lean batched env follows it
    True
    >>> failed_worker(RuntimeError("At least one process failed: worker 1 (exit code -9). ..."))
    (1, -9)
"""

from __future__ import annotations

import queue
import re
from collections.abc import Iterator
from typing import NamedTuple

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl._utils import seed_generator
from torchrl.collectors import Collector, MultiAsyncCollector
from torchrl.collectors import _runner as torchrl_runner
from torchrl.weight_update import SharedMemWeightSyncScheme


class PrivateMember(NamedTuple):
    """One private member of TorchRL (or tensordict) that this module uses.

    ``kind`` says what the unit test checks: ``"module attribute"`` (a value of
    ``expected_type``), ``"class attribute"``, ``"property"``, ``"method"`` (callable with
    ``parameters``), ``"instance attribute"`` (set on a built instance of ``owner``).
    """

    owner: str  # "module" or "module:Class"
    name: str
    kind: str
    why: str
    replacement: str
    parameters: tuple[str, ...] = ()
    expected_type: type | None = None


PRIVATE_MEMBERS: tuple[PrivateMember, ...] = (
    PrivateMember("torchrl.collectors._runner", "_MIN_TIMEOUT", "module attribute",
                  "the worker loop polls its pipe this long after every batch; 0 gives the millisecond back",
                  "a collector argument for the worker's poll timeout", expected_type=float),
    PrivateMember("torchrl._utils", "seed_generator", "method",
                  "SerialEnv's seed chain, which the lean batched env's envs follow",
                  "a public seed-chain function", parameters=("seed",)),
    PrivateMember("torchrl._utils", "_check_for_faulty_process", "method",
                  "its RuntimeError's 'worker N (exit code C)' names a dead worker when TorchRL notices first",
                  "an exception type carrying the worker index and exit code", parameters=("processes",)),
    PrivateMember("torchrl.collectors:Collector", "_ignore_rb", "class attribute",
                  "the worker loop sets it on the collector_class it is given (our factory); we hand it on",
                  "the worker loop passing it to the collector's constructor"),
    PrivateMember("torchrl.collectors:BaseCollector", "_iteration_started", "class attribute",
                  "our __iter__ replaces TorchRL's and sets it as TorchRL's does",
                  "a hook for what happens when an iteration raises"),
    PrivateMember("torchrl.collectors:MultiAsyncCollector", "_queue_len", "property",
                  "the hand-over queue must hold one batch per worker, else a worker drops batches",
                  "a queue-length argument"),
    PrivateMember("torchrl.collectors:MultiAsyncCollector", "_get_from_queue", "method",
                  "each batch is accounted and the workers checked the moment it arrives",
                  "a public per-batch hook", parameters=("self", "timeout")),
    PrivateMember("torchrl.weight_update:SharedMemWeightSyncScheme", "_ack_queues", "instance attribute",
                  "a push waits worker by worker, with a timeout, while checking the worker is alive",
                  "a public wait for one worker's acknowledgement with a timeout", expected_type=dict),
    PrivateMember("torchrl.collectors:Collector", "_carrier", "instance attribute",
                  "the lean rollout reads and writes the trajectory ids the next batch starts from",
                  "public access to the collector's current step", expected_type=TensorDictBase),
    PrivateMember("torchrl.collectors:Collector", "_traj_pool", "property",
                  "the lean rollout draws new trajectory ids for envs that ended",
                  "a public trajectory-id allocator"),
    PrivateMember("torchrl.collectors:Collector", "_final_rollout", "instance attribute",
                  "the lean rollout writes its batch into TorchRL's preallocated batch",
                  "a public output buffer (or none: the lean batch is returned as it is)",
                  expected_type=TensorDictBase),
    PrivateMember("torchrl.collectors:Collector", "_use_buffers", "instance attribute",
                  "whether TorchRL hands out its preallocated batch (the lean rollout does the same)",
                  "a public attribute"),
    PrivateMember("torchrl.collectors:Collector", "_maybe_set_truncated", "method",
                  "marks the last step of a batch truncated, as TorchRL's rollout does",
                  "a public post-rollout hook", parameters=("self", "final_rollout")),
    PrivateMember("torchrl.collectors:Collector", "_frames", "instance attribute",
                  "lock-step rounds count the frames that arrived where TorchRL's own iterator does, "
                  "since _should_use_random_frames reads them there",
                  "a public frame count, or a public argument for random actions per batch", expected_type=int),
    PrivateMember("torchrl.collectors:Collector", "_should_use_random_frames", "method",
                  "random actions for the first init_random_frames, decided as TorchRL decides",
                  "a public predicate", parameters=("self",)),
    PrivateMember("torchrl.collectors:Collector", "_wrapped_policy", "property",
                  "the lean rollout calls the policy's module on tensors, skipping the TensorDict wrapper",
                  "a public attribute for the policy as given"),
    PrivateMember("torchrl.collectors:Collector", "_cast_to_policy_device", "instance attribute",
                  "the lean rollout runs only where no device casts happen", "a public attribute",
                  expected_type=bool),
    PrivateMember("torchrl.collectors:Collector", "_cast_to_env_device", "instance attribute",
                  "the lean rollout runs only where no device casts happen", "a public attribute",
                  expected_type=bool),
    PrivateMember("torchrl.collectors:Collector", "_compact_next_keys", "instance attribute",
                  "the lean rollout runs only where TorchRL keeps every 'next' key", "a public attribute",
                  expected_type=tuple),
    PrivateMember("tensordict:TensorDict", "_new_unsafe", "method",
                  "builds the lean env's per-step TensorDicts without per-entry checks (microseconds a step)",
                  "TensorDict(..., batch_size, ...) without checks, where tensordict offers it",
                  parameters=("source", "batch_size")),
)
"""Each private member used here: where it lives, what kind of member, why, what would replace it."""


# --- seeds and TensorDicts (the lean batched env) ---------------------------------------

def next_seed(seed: int) -> int:
    """The seed after ``seed`` in the chain TorchRL's ``SerialEnv`` seeds its envs with."""
    return seed_generator(seed)


def tensordict_unchecked(entries: dict[str, torch.Tensor], batch_size: torch.Size) -> TensorDict:
    """A TensorDict of ``entries`` built without tensordict's per-entry checks (the caller
    guarantees shapes and devices)."""
    return TensorDict._new_unsafe(entries, batch_size=batch_size)


# --- the worker process ------------------------------------------------------------------

def skip_worker_poll_wait() -> None:
    """Makes TorchRL's worker loop poll its pipe without waiting after every batch.

    It polls for ``_MIN_TIMEOUT`` (1 ms) for a message the learner sent meanwhile; a poll
    without a wait finds such a message too and gives the millisecond back (one worker,
    64-wide policy: 6027 -> 6441 frames/s at one env and 128-frame batches, 20708 -> 21994
    at 16 envs).
    """
    torchrl_runner._MIN_TIMEOUT = 0.0


def hand_on_ignore_rb(factory: object, collector_class: type[Collector]) -> None:
    """TorchRL's worker loop sets ``_ignore_rb`` on the ``collector_class`` it is given; when
    that is a ``factory`` building ``collector_class``, this hands the value on to it."""
    collector_class._ignore_rb = vars(factory).get("_ignore_rb", Collector._ignore_rb)


_FAULTY_PROCESS = re.compile(r"worker (\d+) \(exit code (-?\d+)\)")


def failed_worker(error: BaseException) -> tuple[int, int] | None:
    """``(worker, exit code)`` of TorchRL's report of a dead worker, ``None`` for any other error."""
    match = _FAULTY_PROCESS.search(str(error)) if isinstance(error, RuntimeError) else None
    return None if match is None else (int(match.group(1)), int(match.group(2)))


# --- the learner's side of a multi-process collector -------------------------------------

# What reading a batch raises when the worker that handed it over has died.
UNREADABLE = (ConnectionError, EOFError, FileNotFoundError)


class HandOverCollector(MultiAsyncCollector):
    """TorchRL's ``MultiAsyncCollector`` with the hooks an actor pool needs, each in place of
    a private TorchRL behaviour:

    - the hand-over queue holds one batch per worker (TorchRL's holds one, and a worker whose
      put times out after a second throws its batch away);
    - :meth:`batch_arrived` runs for every batch the moment it arrives, and
      :meth:`nothing_arrived` whenever a wait for one times out, :meth:`unreadable_batch` when
      one cannot be read (its worker died);
    - an exception of a type in :attr:`raised_without_shutdown` leaves the workers running
      (TorchRL's ``__iter__`` shuts them down on any exception);
    - weights are sent without waiting for the workers (:meth:`wait_for_weights` waits for
      one), through the scheme TorchRL would pick itself (``SharedMemWeightSyncScheme``).
    """

    raised_without_shutdown: tuple[type[BaseException], ...] = ()

    def __init__(self, *args, **kwargs):
        self.weights_scheme = SharedMemWeightSyncScheme(sync=False)
        super().__init__(*args, weight_sync_schemes={"policy": self.weights_scheme}, **kwargs)

    @property
    def _queue_len(self) -> int:
        return self.num_workers

    def __iter__(self) -> Iterator[TensorDictBase]:
        self._iteration_started = True
        try:
            yield from self.iterator()
        except self.raised_without_shutdown:
            raise
        except Exception:
            self.shutdown()
            raise

    def rounds(self) -> Iterator[list[TensorDictBase | None]]:
        """Lock-step collection: each round every worker collects one batch with the weights
        it holds, and the next round starts only when the consumer asks for it, after the
        learner trained on this one and pushed new weights. (TorchRL's own iterator tells a
        worker to go on the moment its batch arrives, so its next batch is collected with
        the weights it had.) Yields each round's batches in worker order (``None`` for a
        batch a worker wrote itself)."""
        self._iteration_started = True
        try:
            while self._frames < self.total_frames:  # TorchRL's count, which ends its random frames
                self._go_ahead()
                batches: dict[int, TensorDictBase | None] = {}
                while len(batches) < self.num_workers:
                    try:
                        idx, _, out = self._get_from_queue(timeout=1.0)
                    except (queue.Empty, TimeoutError):
                        continue
                    self._frames += out.numel() if out is not None else self.frames_per_batch_worker()
                    batches[idx] = out
                yield [batches[worker] for worker in range(self.num_workers)]
        except self.raised_without_shutdown:
            raise
        except Exception:
            self.shutdown()
            raise
        self.running = False

    def _go_ahead(self) -> None:
        """Tells every worker to collect its next batch (random actions for the first frames)."""
        message = "continue_random" if self._should_use_random_frames() else "continue"
        for pipe in self.pipes:
            pipe.send((None, message))
        self.running = True

    def _get_from_queue(self, timeout=None):
        try:
            idx, j, out = super()._get_from_queue(timeout=timeout)
        except (queue.Empty, TimeoutError):
            self.nothing_arrived()
            raise
        except UNREADABLE as error:
            self.unreadable_batch(error)
            raise
        self.batch_arrived(idx, out)
        return idx, j, out

    def shutdown(self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True) -> None:
        """TorchRL's shutdown, then the weight-sync scheme's own, now: left to garbage
        collection at interpreter exit, the scheme's ``__del__`` puts "stop" on a queue, which
        starts a feeder thread that can never start then, and the process hangs on exit."""
        try:
            super().shutdown(timeout=timeout, close_env=close_env, raise_on_error=raise_on_error)
        finally:
            self.weights_scheme.shutdown()

    def take_batch(self, timeout: float) -> tuple[int, TensorDictBase | None]:
        """The next handed-over batch and its worker, waiting up to ``timeout`` (``queue.Empty``
        or ``TimeoutError`` after), without :meth:`batch_arrived`."""
        idx, _, out = MultiAsyncCollector._get_from_queue(self, timeout=timeout)
        return idx, out

    def batch_arrived(self, worker: int, batch: TensorDictBase | None) -> None:
        """Runs when ``batch`` arrived from ``worker`` (``None``: the worker wrote it itself)."""

    def nothing_arrived(self) -> None:
        """Runs when a wait for a batch timed out."""

    def unreadable_batch(self, error: BaseException) -> None:
        """Runs when a handed-over batch cannot be read (``error``, then raised): a worker's
        first batch carries its data, which the learner reads through that worker's process,
        so a worker killed before the read leaves its batch unreadable."""

    def send_weights(self, weights: TensorDictBase) -> None:
        """Sends ``weights`` to every worker without waiting for them to take them."""
        self.update_policy_weights_(weights)

    def wait_for_weights(self, worker: int, timeout: float) -> bool:
        """Whether ``worker`` acknowledged the weights sent within ``timeout`` seconds."""
        try:
            self.weights_scheme._ack_queues[worker].get(timeout=timeout)
        except queue.Empty:
            return False
        return True


# --- a single collector's rollout (the lean rollout) ----------------------------------------

TRAJ_IDS = ("collector", "traj_ids")


def rollout_is_plain(collector: Collector) -> bool:
    """Whether ``collector``'s rollout is a plain one, which a lean rollout may replace: no
    per-step replay writes, interruptor, reset per batch, device casts, compiled or
    CUDA-graphed policy or compacted ``"next"`` keys, and trajectory ids tracked."""
    per_step_writes = (collector.replay_buffer is not None and not collector._ignore_rb
                       and not collector.extend_buffer)
    return (not per_step_writes and collector.interruptor is None and not collector.reset_at_each_iter
            and not collector._cast_to_policy_device and not collector._cast_to_env_device
            and not collector.compiled_policy and not collector.cudagraphed_policy
            and collector.track_traj_ids and not collector._compact_next_keys)


def policy_module(collector: Collector) -> nn.Module:
    """The policy ``collector`` runs, without its TensorDictModule wrapper."""
    policy = collector._wrapped_policy
    return policy.module if isinstance(policy, TensorDictModule) else policy


def current_traj_ids(collector: Collector) -> torch.Tensor:
    """The trajectory ids of the step ``collector`` continues from (the carrier's)."""
    return collector._carrier.get(TRAJ_IDS)


def set_current_traj_ids(collector: Collector, traj_ids: torch.Tensor) -> None:
    collector._carrier.set(TRAJ_IDS, traj_ids.reshape(collector._carrier.batch_size))


def new_traj_ids(collector: Collector, count: int) -> torch.Tensor:
    """``count`` fresh trajectory ids from ``collector``'s pool."""
    return collector._traj_pool.get_traj_and_increment(count)


def random_frames_now(collector: Collector) -> bool:
    """Whether ``collector``'s next step takes a random action (``init_random_frames``)."""
    return collector._should_use_random_frames()


def finish_rollout(collector: Collector, batch: TensorDict) -> TensorDictBase:
    """``batch`` as TorchRL's rollout hands it out: in its preallocated batch if it uses one,
    with the last step marked truncated where TorchRL marks it."""
    if collector._use_buffers:
        with collector._final_rollout.unlock_():
            collector._final_rollout.update_(batch)
        batch = collector._final_rollout
    return collector._maybe_set_truncated(batch)
