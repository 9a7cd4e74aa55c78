"""Parallel learners: ``trainer.devices=N`` Lightning DDP ranks training on the one replay.

Rank 0 is the run: it owns the actors, the replay, the broadcast, the evaluation, the logs
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
(``python -m actorq ...`` with the same overrides), so they compose the same config.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.utilities import rank_zero_only

from actorq.replay.base import ReplayBuffer, Sample
from actorq.replay.experience import Arrivals


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
    """

    def __init__(self, replay: ReplayBuffer | None, rank: int, world_size: int):
        self.replay = replay
        self.rank = rank
        self.world_size = world_size
        self.size = 0
        self._prioritized = False

    def __len__(self) -> int:
        return len(self.replay) if self.replay is not None else self.size

    def sample(self, batch_size: int) -> Sample:
        """This rank's share of a batch of ``batch_size`` drawn on rank 0."""
        shares: list[Any] | None = None
        if self.rank == 0:
            whole = self.replay.sample(batch_size)
            prioritized = type(self.replay).update_priorities is not ReplayBuffer.update_priorities
            shares = [(share, prioritized) for share in split(whole, self.world_size)]
        received: list[Any] = [None]
        dist.scatter_object_list(received, shares, src=0)
        share, self._prioritized = received[0]
        return share

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Sends this rank's TD errors to rank 0, which updates the whole batch's priorities
        (nothing crosses for a uniform replay)."""
        if not self._prioritized:
            return
        gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object((indices, priorities), gathered, dst=0)
        if self.rank == 0:
            self.replay.update_priorities(torch.cat([i for i, _ in gathered]), torch.cat([p for _, p in gathered]))


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
    flag = torch.tensor([int(bool(more))])
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def ranks_in_sync(modules: Iterable[torch.nn.Module], learner_steps: int) -> dict[str, Any]:
    """Every rank's updates and how far its weights are from rank 0's (the largest
    absolute difference over every parameter and buffer; 0.0 when DDP keeps them identical)."""
    flat = torch.cat([t.detach().reshape(-1).float().cpu() for m in modules for t in m.state_dict().values()
                      if torch.is_tensor(t) and t.is_floating_point()])
    reference = flat.clone()
    dist.broadcast(reference, src=0)
    drift = torch.tensor([(flat - reference).abs().max().item(), float(learner_steps)])
    gathered = [torch.zeros_like(drift) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, drift)
    return {"ranks": len(gathered), "learner_steps": [int(g[1]) for g in gathered],
            "max_weight_difference": max(float(g[0]) for g in gathered)}
