"""Collector batches in, n-step transitions into the replay, and a count of what arrived.

The learner process writes through an :class:`TransitionWriter` itself, or, with a
:class:`~actorq.data.replay.shared.SharedReplay`, hands it to the actor processes, which then
write their own batches while the learner samples. Either way the learner learns from
:meth:`TransitionWriter.arrivals` how many frames (and which finished episodes) came in.

Example:
    >>> from tensordict import TensorDict
    >>> from actorq.data.replay.uniform import UniformReplay
    >>> replay = UniformReplay(capacity=100)
    >>> writer = TransitionWriter(replay, n_step=1, gamma=0.99)
    >>> T = 5
    >>> batch = TensorDict({
    ...     "observation": torch.zeros(T, 3), "action": torch.zeros(T, 1),
    ...     "next": {"observation": torch.zeros(T, 3), "reward": torch.ones(T, 1),
    ...              "terminated": torch.zeros(T, 1, dtype=torch.bool),
    ...              "done": torch.tensor([[False], [False], [True], [False], [False]]),
    ...              "episode_reward": torch.arange(T, dtype=torch.float32).unsqueeze(-1)}},
    ...     batch_size=[T])
    >>> writer.extend(batch)
    >>> len(replay), writer.write_count, writer.arrivals()
    (5, 5, Arrivals(frames=5, episodes=1, return_sum=2.0))
    >>> writer.arrivals()  # nothing new since
    Arrivals(frames=0, episodes=0, return_sum=0.0)
"""

from __future__ import annotations

import multiprocessing

import torch
from tensordict import TensorDictBase

from actorq.algos.batches import Arrivals
from actorq.data.nstep import nstep_transitions
from actorq.data.replay.base import ReplayBuffer
from actorq.data.replay.shared import SharedReplay

_FRAMES, _EPISODES, _RETURN_SUM = range(3)


class TransitionWriter:
    """Turns collector batches ``[*envs, T]`` into n-step transitions and stores them.

    Writes into the replay in this process, or, for a :class:`SharedReplay`, through its
    shared-memory writer, so that the actor processes can write directly
    (``in_workers``). Like the shared replay's writer it holds a lock, so it reaches another
    process only as an argument when that process is created (a TorchRL collector's
    ``replay_buffer=`` argument does this: each worker calls :meth:`extend` with its
    batches).

    Args:
        replay: where the transitions go.
        n_step: rewards summed per transition.
        gamma: discount per step.
    """

    def __init__(self, replay: ReplayBuffer, n_step: int, gamma: float):
        self.in_workers = isinstance(replay, SharedReplay)
        self.target = replay.writer() if self.in_workers else replay
        self.n_step = n_step
        self.gamma = gamma
        self.counts = torch.zeros(3, dtype=torch.float64).share_memory_()
        self.lock = multiprocessing.get_context("spawn").Lock()
        self._reported = torch.zeros(3, dtype=torch.float64)  # learner side only
        # TorchRL's multi-process collectors initialise a buffer that has no `_storage`;
        # this one is allocated already.
        self._storage = None

    def extend(self, batch: TensorDictBase) -> None:
        """Stores ``batch`` as n-step transitions (or whole, for a replay that ``takes_batches``:
        the frame replay) and counts its frames and ended episodes (called by the collector
        workers, or by the learner)."""
        takes_batches = getattr(self.target, "takes_batches", False)
        transitions = batch if takes_batches else nstep_transitions(batch, self.n_step, self.gamma)
        if self.in_workers:
            self.target.write(transitions)
        else:
            self.target.extend(transitions)
        returns = ended_episode_returns(batch)
        arrived = torch.tensor([batch.numel(), len(returns), returns.sum()], dtype=torch.float64)
        with self.lock:
            self.counts += arrived

    @property
    def write_count(self) -> int:
        """Frames written so far, by every process (what TorchRL collectors read to decide
        on random actions for the first frames)."""
        return int(self.counts[_FRAMES])

    def arrivals(self) -> Arrivals:
        """What arrived since the previous call (learner process only)."""
        with self.lock:
            counts = self.counts.clone()
        new = counts - self._reported
        self._reported = counts
        return Arrivals(int(new[_FRAMES]), int(new[_EPISODES]), float(new[_RETURN_SUM]))


def ended_episode_returns(batch: TensorDictBase) -> torch.Tensor:
    """Returns (float64) of the episodes that ended in ``batch``, from the running
    ``episode_reward`` the environments keep (empty if they keep none)."""
    done = batch["next", "done"].reshape(-1)
    if "episode_reward" not in batch["next"].keys():
        return torch.zeros(0, dtype=torch.float64)
    return batch["next", "episode_reward"].reshape(-1)[done].double()
