"""Prioritized replay in shared memory: actor processes write, the learner samples, concurrently.

Writers copy transitions straight into shared tensors; only the reservation of slots takes a
lock. Each slot carries a *stamp*: the sequence number of the transition whose copy into it
is complete, or ``WRITING`` while a writer fills it. The learner owns the sum tree and folds
finished slots into it lazily, when it samples ("lazy writing", as in PAL): a slot's priority
stays zero until its stamp says its data is complete, and drops to zero once a writer starts
overwriting it. Because a writer can start overwriting a slot after the learner drew it, the
learner also re-reads the stamps after copying a batch and redraws any row whose stamp
changed meanwhile, so a half-written row is never returned.

Example:
    >>> from tensordict import TensorDict
    >>> row = TensorDict({"observation": torch.zeros(3), "reward": torch.zeros(())}, [])
    >>> buffer = SharedReplay(capacity=100, template=row)
    >>> writer = buffer.writer()  # picklable: pass it to worker processes when starting them
    >>> writer.write(TensorDict({"observation": torch.ones(8, 3), "reward": torch.ones(8)}, [8]))
    >>> len(buffer), buffer.sample(4).batch["reward"].tolist()
    (8, [1.0, 1.0, 1.0, 1.0])
"""

from __future__ import annotations

import multiprocessing
import time

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from actorq.algos.batches import Sample
from actorq.data.replay.base import ReplayBuffer
from actorq.data.replay.priorities import Priorities, as_numpy
from actorq.data.replay.storage import TransitionStorage

EMPTY = -1  # stamp of a slot never written
WRITING = -2  # stamp of a slot a writer is filling


class ReplayWriter:
    """Writes transitions into a :class:`SharedReplay` from any process.

    Get one from :meth:`SharedReplay.writer` and hand it to a worker process as an argument
    when the process is created (it holds a lock, which multiprocessing only lets travel that
    way); any number of writers may write at once.

    Args:
        storage: the shared transition storage.
        stamps: shared int64 tensor, one stamp per slot.
        reserved: shared int64 tensor holding the number of transitions reserved so far.
        lock: guards ``reserved`` and the ``WRITING`` stamps.
        stall_timeout_s: how long to wait for a slot that another writer is still filling
            before concluding that writer died.
    """

    def __init__(
        self,
        storage: TransitionStorage,
        stamps: torch.Tensor,
        reserved: torch.Tensor,
        lock,
        stall_timeout_s: float = 30.0,
    ):
        self.storage = storage
        self.capacity = storage.capacity
        self.stamps = stamps
        self.reserved = reserved
        self.lock = lock
        self.stall_timeout_s = stall_timeout_s
        self._views()

    def _views(self) -> None:
        self._stamps = self.stamps.numpy()
        self._reserved = self.reserved.numpy()

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_stamps", "_reserved")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._views()

    def write(self, transitions: TensorDictBase) -> None:
        """Appends a batch of transitions (batch size ``[N]``), overwriting the oldest."""
        if transitions.batch_size[0] > self.capacity:
            transitions = transitions[-self.capacity :]
        n = transitions.batch_size[0]
        if n == 0:
            return
        start = self._reserve(n)
        first_slot = start % self.capacity
        slices = _ring_slices(first_slot, n, self.capacity)
        try:
            self.storage.write(first_slot, transitions)
        except BaseException:
            for ring_slice, _ in slices:  # let later writers reuse the slots
                self._stamps[ring_slice] = EMPTY
            raise
        sequence = start + np.arange(n)
        for ring_slice, part in slices:
            self._stamps[ring_slice] = sequence[part]  # publish: the data above is complete

    def _reserve(self, n: int) -> int:
        """Claims the next ``n`` slots and stamps them ``WRITING``; returns the sequence
        number of the first one."""
        deadline = time.monotonic() + self.stall_timeout_s
        while True:
            with self.lock:
                start = int(self._reserved[0])
                slices = [s for s, _ in _ring_slices(start % self.capacity, n, self.capacity)]
                # A slot still being filled means its writer fell a whole buffer behind;
                # writing over it at the same time would mix the two transitions.
                if not any((self._stamps[s] == WRITING).any() for s in slices):
                    for ring_slice in slices:
                        self._stamps[ring_slice] = WRITING
                    self._reserved[0] = start + n
                    return start
            if time.monotonic() > deadline:
                raise RuntimeError(
                    "replay slots stayed half-written for "
                    f"{self.stall_timeout_s} s: did a writer process die while writing?"
                )
            time.sleep(1e-4)


class SharedReplay(ReplayBuffer):
    """Prioritized replay whose storage lives in shared memory, written by many processes.

    The learner process creates it, hands :meth:`writer` handles to actor processes, and
    samples and updates priorities as with :class:`~actorq.data.replay.prioritized.PrioritizedReplay`
    (same sampling rule and arguments). Only the learner process may call :meth:`sample`,
    :meth:`update_priorities` and ``len``; any process may write.

    Args:
        capacity: maximum number of transitions kept.
        template: one transition (or a batch of them) giving the keys, shapes and dtypes to
            allocate, since writers need the storage before the first transition exists.
        alpha: priority exponent; 0 samples uniformly.
        beta: initial importance-sampling exponent, in ``[0, 1]``.
        beta_annealing_steps: number of :meth:`sample` calls until ``beta`` reaches 1.
        fanout: children per sum-tree node, a power of two (2 to 256).
        eps: added to every priority so that no transition becomes unreachable.
        seed: seed of the sampling generator.

    Example:
        >>> from tensordict import TensorDict
        >>> row = TensorDict({"reward": torch.zeros(())}, [])
        >>> buffer = SharedReplay(capacity=1000, template=row)
        >>> writer = buffer.writer()  # picklable: pass it to a worker process when it starts
        >>> writer.write(TensorDict({"reward": torch.ones(10)}, [10]))  # what the worker does
        >>> len(buffer)
        10
    """

    def __init__(
        self,
        capacity: int,
        template: TensorDictBase,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_annealing_steps: int = 100_000,
        fanout: int = 16,
        eps: float = 1e-6,
        seed: int = 0,
    ):
        self.priorities = Priorities(
            capacity, alpha, beta, beta_annealing_steps, fanout, eps, seed
        )
        self.capacity = capacity
        storage = TransitionStorage(template, capacity, shared=True)
        stamps = torch.full((capacity,), EMPTY, dtype=torch.int64).share_memory_()
        reserved = torch.zeros(1, dtype=torch.int64).share_memory_()
        lock = multiprocessing.get_context("spawn").Lock()
        self._writer = ReplayWriter(storage, stamps, reserved, lock)
        self._stamps = stamps.numpy()
        self._reserved = reserved.numpy()
        # Learner-side view: the stamp each slot's priority in the tree belongs to.
        self._published = np.full(capacity, EMPTY, dtype=np.int64)
        self._synced = 0  # reservations already looked at
        self._unfinished = np.empty(0, dtype=np.int64)  # sequence numbers still being written
        self.size = 0
        self.redrawn_rows = 0  # rows drawn again because a writer overwrote them mid-copy

    @property
    def beta(self) -> float:
        """The importance-sampling exponent the next :meth:`sample` uses."""
        return self.priorities.beta

    @property
    def storage(self) -> TransitionStorage:
        return self._writer.storage

    @property
    def reserved(self) -> int:
        """Number of transitions written or being written so far, by all writers."""
        return int(self._reserved[0])

    def writer(self) -> ReplayWriter:
        """A picklable handle for writing from other processes."""
        return self._writer

    def extend(self, transitions: TensorDictBase) -> None:
        self._writer.write(transitions)

    def sample(self, batch_size: int) -> Sample:
        self._sync()
        slots, probabilities = self._draw(batch_size)
        batch = self.storage.read(torch.from_numpy(slots))
        torn = self._overwritten(slots)
        while len(torn):  # overwritten while being copied: draw those rows again
            self.redrawn_rows += len(torn)
            self._sync()
            slots[torn], probabilities[torn] = self._draw(len(torn))
            batch[torch.from_numpy(torn)] = self.storage.read(torch.from_numpy(slots[torn]))
            torn = torn[self._overwritten(slots[torn])]
        weights = self.priorities.weights(probabilities)
        self.priorities.anneal()
        indices = torch.from_numpy(slots)
        return Sample(batch, indices, torch.from_numpy(weights.astype(np.float32)))

    def _draw(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        self._wait_for_a_published_row()
        return self.priorities.draw(batch_size)

    def _wait_for_a_published_row(self) -> None:
        """Writers lapping a small buffer can, for a moment, have every slot in the middle of
        a write or rewritten since :meth:`_sync` read the write position; the next sync
        then finds them finished. Raises at once if nothing was ever reserved."""
        deadline = time.monotonic() + self._writer.stall_timeout_s
        while self.size == 0:
            if self.reserved == 0:
                raise RuntimeError("cannot sample: no transition has been completely written yet")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    "cannot sample: no transition has been completely written for "
                    f"{self._writer.stall_timeout_s} s: did a writer process die while writing?"
                )
            time.sleep(1e-4)
            self._sync()

    def _overwritten(self, slots: np.ndarray) -> np.ndarray:
        """Positions of ``slots`` whose stamp changed since the learner published them.

        Called after copying the rows: a writer stamps a slot ``WRITING`` before touching its
        data, so an unchanged stamp means the copy saw only the published transition.
        """
        return np.flatnonzero(self._stamps[slots] != self._published[slots])

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        slots = as_numpy(indices)
        if len(slots) and (slots.min() < 0 or slots.max() >= self.capacity):
            raise ValueError(f"replay indices must lie in [0, {self.capacity})")
        # Slots a writer has started to overwrite stay at priority zero until it finishes.
        current = self._published[slots] >= 0
        self.priorities.update(slots[current], as_numpy(priorities)[current])

    def __len__(self) -> int:
        self._sync()
        return self.size

    def _sync(self) -> None:
        """Folds the writers' progress into the sum tree: slots whose copy has finished
        since the last call get the largest priority, slots being rewritten get zero."""
        reserved = int(self._reserved[0])
        oldest_live = reserved - self.capacity  # older sequence numbers were overwritten
        fresh = np.arange(max(self._synced, oldest_live), reserved)
        unfinished = self._unfinished[self._unfinished >= oldest_live]
        sequence = np.concatenate([unfinished, fresh])
        self._synced = reserved
        if not len(sequence):
            return
        slots = sequence % self.capacity
        finished = self._stamps[slots] == sequence
        previously_published = int((self._published[slots] >= 0).sum())
        self._published[slots] = np.where(finished, sequence, EMPTY)
        self.priorities.add(slots, available=finished)
        self._unfinished = sequence[~finished]
        self.size += int(finished.sum()) - previously_published

    def state_dict(self) -> dict:
        state = self.priorities.state_dict()
        if self.save_contents:
            state["contents"] = self.contents()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.priorities.load_state_dict(state)
        if "contents" in state:
            self.load_contents(state["contents"])

    def contents(self) -> dict:
        """The slots written so far with their stamps and sum-tree leaves, and the write
        position, as the learner last synced them. Writers keep writing meanwhile: a slot
        whose stamp changed while it was copied is saved as empty (priority zero)."""
        self._sync()
        written = np.arange(min(self._synced, self.capacity))
        rows = self.storage.read(torch.from_numpy(written))
        stamps = self._published[written].copy()
        stamps[self._overwritten(written)] = EMPTY
        leaves = np.where(stamps >= 0, self.priorities.tree.values(written), 0.0)
        return {"rows": rows.to_dict(), "stamps": torch.from_numpy(stamps),
                "priorities": torch.from_numpy(leaves), "reserved": self._synced}

    def load_contents(self, contents: dict) -> None:
        """Puts back what :meth:`contents` saved, before any writer starts."""
        stamps = contents["stamps"].numpy()
        written = np.arange(len(stamps))
        if len(written):
            self.storage.write(0, TensorDict(contents["rows"], batch_size=[len(written)]))
        self._stamps[:] = EMPTY
        self._stamps[written] = stamps
        self._published[:] = EMPTY
        self._published[written] = stamps
        self._reserved[0] = self._synced = int(contents["reserved"])
        self._unfinished = np.empty(0, dtype=np.int64)
        self.size = int((stamps >= 0).sum())
        self.priorities.tree.update(written, contents["priorities"].numpy())


def _ring_slices(first: int, n: int, capacity: int) -> list[tuple[slice, slice]]:
    """``n`` consecutive ring slots from ``first``, as (slots, positions in the batch) pairs."""
    head = min(n, capacity - first)
    pairs = [(slice(first, first + head), slice(0, head))]
    if head < n:
        pairs.append((slice(0, n - head), slice(head, n)))
    return pairs

