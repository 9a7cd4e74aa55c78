"""Uniform replay: a ring buffer of preallocated transitions, sampled uniformly.

Example:
    >>> from tensordict import TensorDict
    >>> buffer = UniformReplay(capacity=100)
    >>> rows = TensorDict({"observation": torch.zeros(10, 3), "action": torch.zeros(10, 1),
    ...                    "reward": torch.zeros(10), "next_observation": torch.zeros(10, 3),
    ...                    "discount": torch.ones(10)}, batch_size=[10])
    >>> buffer.extend(rows)
    >>> buffer.sample(4).batch.batch_size
    torch.Size([4])
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase

from actorq.algos.batches import Sample
from actorq.data.replay.base import ReplayBuffer
from actorq.data.replay.storage import TransitionStorage


class UniformReplay(ReplayBuffer):
    """Fixed-capacity FIFO storage with uniform sampling.

    Args:
        capacity: maximum number of transitions kept.
        seed: seed of the sampling generator.
    """

    def __init__(self, capacity: int, seed: int = 0):
        if capacity <= 0:
            raise ValueError(f"replay capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.storage: TransitionStorage | None = None
        self.cursor = 0
        self.size = 0
        self.generator = torch.Generator().manual_seed(seed)

    def extend(self, transitions: TensorDictBase) -> None:
        if self.storage is None:
            self.storage = TransitionStorage(transitions, self.capacity)
        n = transitions.batch_size[0]
        if n > self.capacity:
            transitions = transitions[-self.capacity :]
            n = self.capacity
        self.storage.write(self.cursor, transitions)
        self.cursor = (self.cursor + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int) -> Sample:
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        indices = torch.randint(self.size, (batch_size,), generator=self.generator)
        return Sample(self.storage.read(indices), indices, torch.ones(batch_size))

    def __len__(self) -> int:
        return self.size

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state(), **self.contents()}

    def load_state_dict(self, state: dict) -> None:
        if "generator" in state:
            self.generator.set_state(state["generator"])
        self.load_contents(state)

    def contents(self) -> dict:
        """With ``save_contents``: the stored transitions in slot order and the write
        position (a copy of the buffer in memory while the checkpoint is written)."""
        if not self.save_contents or self.size == 0:
            return {}
        rows = self.storage.read(torch.arange(self.size))
        return {"contents": {"rows": rows.to_dict(), "cursor": self.cursor, "size": self.size}}

    def load_contents(self, state: dict) -> None:
        """Puts back what :meth:`contents` saved (nothing if it saved nothing)."""
        if "contents" not in state:
            return
        contents = state["contents"]
        self.storage, self.cursor, self.size = None, 0, 0
        self.extend(TensorDict(contents["rows"], batch_size=[contents["size"]]))
        self.cursor, self.size = contents["cursor"], contents["size"]
