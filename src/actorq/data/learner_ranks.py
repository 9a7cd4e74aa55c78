"""Parallel learners: ``trainer.devices=N`` Lightning DDP ranks training on the one replay.

Rank 0 is the run: it owns the actors, the replay, the push, the evaluation, the logs
and the checkpoints. Ranks 1..N-1 are learners only. They never build a replay: each update,
rank 0 draws the whole batch (``algo.batch_size``) from the one replay, exactly as a single
learner does, and hands each rank its share (:class:`RankSampling`). Every rank computes the
gradients of its share; DDP averages them, so each optimizer step is the step a single
learner takes on the whole batch and the weights stay identical on every rank. The ranks'
TD errors come back to rank 0, which updates the priorities of the whole batch.

Why rank 0 samples for everyone rather than each rank sampling the replay itself: the replay
then stays one object in one process whatever its kind (uniform, prioritized, shared), a
prioritized replay's importance weights are normalized over the whole batch as with one
learner, and ``trainer.devices`` changes how fast updates run, not what they compute.

Every rank meets rank 0 at the same points, in the same order: once per batch of experience
(:func:`follow_batches`, :func:`share_arrivals`) and once or twice per update (the share and
the TD errors). Lightning launches the other ranks by running the same command again
(``actorq train ...`` with the same overrides), so they compose the same config.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.utilities import rank_zero_only
from tensordict import TensorDict

from actorq.algos.batches import Arrivals, Sample
from actorq.algos.ranks import collective_device
from actorq.data.replay.base import ReplayBuffer


def strategy(devices: int) -> str | DDPStrategy:
    """Lightning's strategy for ``trainer.devices`` learner ranks: DDP for more than one.

    Each update runs a critic and an actor backward pass, and each touches only some of the
    parameters, hence ``find_unused_parameters``.
    """
    if devices == 1:
        return "auto"
    return DDPStrategy(find_unused_parameters=True)


def launched_rank() -> int:
    """This process's learner rank, known before Lightning sets up DDP: 0 for the command a
    user ran, 1..N-1 for the copies of it that Lightning starts."""
    return rank_zero_only.rank


class RankSampling:
    """The one replay, as each learner rank samples it.

    On rank 0 it wraps the replay: :meth:`sample` draws the whole batch and scatters the
    shares; on the other ranks ``replay`` is ``None`` and :meth:`sample` receives a share.
    ``len()`` is the replay's size as of the last :func:`share_arrivals`.

    A share crosses as one flat byte tensor (one ``scatter``); its layout (the fields' names,
    dtypes and shapes, which stay the same all run) crosses once: pickled objects cost an order
    of magnitude more per update (docs/measured/actors.md, Parallel learners).
    """

    def __init__(self, replay: ReplayBuffer | None, rank: int, world_size: int):
        self.replay = replay
        self.rank = rank
        self.world_size = world_size
        self.size = 0
        self._layout: Layout | None = None
        self._whole_indices: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.replay) if self.replay is not None else self.size

    def kept_transitions(self) -> int:
        """What a checkpoint keeps of the replay (rank 0's; the file is rank 0's)."""
        return self.replay.kept_transitions() if self.replay is not None else 0

    def sample(self, batch_size: int) -> Sample:
        """This rank's share of a batch of ``batch_size`` drawn on rank 0."""
        buffers, layout = None, None
        if self.rank == 0:
            whole = self.replay.sample(batch_size)
            self._whole_indices = whole.indices
            prioritized = type(self.replay).update_priorities is not ReplayBuffer.update_priorities
            packed = [pack(share, prioritized) for share in split(whole, self.world_size)]
            buffers = [buffer.to(collective_device()) for _, buffer in packed]
            layout = packed[0][0]
        if self._layout is None:  # the first sample: every rank learns the layout
            message = [layout]
            dist.broadcast_object_list(message, src=0)
            self._layout = message[0]
        received = torch.empty(self._layout.nbytes, dtype=torch.uint8, device=collective_device())
        dist.scatter(received, buffers, src=0)
        return unpack(self._layout, received)

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Sends this rank's TD errors to rank 0, which updates the whole batch's priorities
        (nothing crosses for a uniform replay)."""
        if not self._layout.prioritized:
            return
        share = priorities.detach().reshape(-1).to(collective_device(), torch.float32)
        gathered = [torch.empty_like(share) for _ in range(self.world_size)] if self.rank == 0 else None
        dist.gather(share, gathered, dst=0)
        if self.rank == 0:
            self.replay.update_priorities(self._whole_indices, torch.cat(gathered).cpu())


@dataclass(frozen=True)
class Layout:
    """How a :class:`~actorq.algos.batches.Sample` lies in a flat byte tensor: ``fields`` are
    ``(key, dtype, shape)`` in order, keys ``("indices",)``, ``("weights",)`` or
    ``("batch", *nested_key)``; ``prioritized`` says whether TD errors go back to rank 0."""

    fields: tuple[tuple[tuple[str, ...], torch.dtype, tuple[int, ...]], ...]
    prioritized: bool

    @property
    def nbytes(self) -> int:
        return sum(math.prod(shape) * dtype.itemsize for _, dtype, shape in self.fields)


def pack(sample: Sample, prioritized: bool) -> tuple[Layout, torch.Tensor]:
    """``sample`` as one flat byte tensor, and its layout."""
    tensors = {("indices",): sample.indices, ("weights",): sample.weights}
    for key, tensor in sample.batch.items(include_nested=True, leaves_only=True):
        tensors[("batch", *(key if isinstance(key, tuple) else (key,)))] = tensor
    layout = Layout(tuple((key, t.dtype, tuple(t.shape)) for key, t in tensors.items()), prioritized)
    return layout, torch.cat([t.contiguous().reshape(-1).view(torch.uint8) for t in tensors.values()])


def unpack(layout: Layout, buffer: torch.Tensor) -> Sample:
    """The :class:`~actorq.algos.batches.Sample` that :func:`pack` flattened into ``buffer``."""
    tensors, offset = {}, 0
    for key, dtype, shape in layout.fields:
        size = math.prod(shape) * dtype.itemsize
        tensors[key] = buffer[offset:offset + size].clone().view(dtype).reshape(shape)  # clone: aligned
        offset += size
    indices = tensors.pop(("indices",))
    batch = TensorDict({}, batch_size=indices.shape[:1])
    for key, tensor in tensors.items():
        if key[0] == "batch":
            batch.set(key[1:], tensor)
    return Sample(batch=batch, indices=indices, weights=tensors[("weights",)])


def split(sample: Sample, parts: int) -> list[Sample]:
    """``sample`` cut into ``parts`` consecutive shares of equal size."""
    size = sample.indices.shape[0]
    if size % parts:
        raise ValueError(f"a batch of {size} does not split evenly over {parts} learner ranks")
    step = size // parts
    return [Sample(batch=sample.batch[i:i + step], indices=sample.indices[i:i + step],
                   weights=sample.weights[i:i + step]) for i in range(0, size, step)]


def share_arrivals(arrivals: Arrivals | None, sampling: RankSampling) -> Arrivals:
    """Rank 0's arrivals (and its replay's size) on every rank, so that every rank counts the
    same frames and runs the same number of updates."""
    message = [(arrivals, len(sampling)) if sampling.rank == 0 else None]
    dist.broadcast_object_list(message, src=0)
    arrivals, sampling.size = message[0]
    return arrivals


def lead_batches(batches: Iterable) -> Iterator:
    """Rank 0's batches of experience, telling the other ranks before each one that one more
    comes (and after the last that none does)."""
    for batch in batches:
        _announce(True)
        yield batch
    _announce(False)


class AtRankZero:
    """What ranks 1..N-1 train on for each batch of experience: it arrived at rank 0."""

    def __repr__(self) -> str:
        return "AT_RANK_ZERO"


AT_RANK_ZERO = AtRankZero()  # not None: Lightning skips the training step of a None batch


def follow_batches() -> Iterator[AtRankZero]:
    """On ranks 1..N-1: :data:`AT_RANK_ZERO` for each batch rank 0 receives, until its actors end."""
    while _announce(None):
        yield AT_RANK_ZERO


def _announce(more: bool | None) -> bool:
    flag = torch.tensor([int(bool(more))], device=collective_device())
    dist.broadcast(flag, src=0)
    return bool(flag.item())
