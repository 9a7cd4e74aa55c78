"""What the local actor pool (:class:`~actorq.actors.pool.ActorPool`) and the Ray actor pool
(:class:`~actorq.actors.ray_pool.RayActorPool`) share: the :class:`ActorSpec` they collect,
the worker env, the frame budget and the restart policy.

Example:
    >>> from torch import nn
    >>> spec = ActorSpec("CartPole-v1", num_workers=2, frames_per_batch=100, total_frames=1_000, max_restarts=1)
    >>> pool = ActorPoolBase(spec, nn.Linear(4, 2))
    >>> len(pool), pool.can_restart  # batches in the run; a failed worker may restart
    (10, True)
    >>> pool.restarts = 1
    >>> pool.can_restart
    False
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from tensordict import TensorDictBase

from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.envs import EnvBase, SerialEnv

from actorq.envs import OBSERVATION, import_suites, make_env
from actorq.util.errors import ConfigError
from actorq.envs import make_batched_env

COLLECTIONS = ("async", "lockstep")
"""How actors collect: ``async``, each worker collects its next batch while the learner trains
on the last one (with the weights it has then); ``lockstep``, a round of every worker's batch
collected with policy version k, the learner trains, version k+1 is pushed, the next round."""

RESTART_SEED_STRIDE = 1_000_003
"""The workers started after restart ``r`` are seeded ``r * RESTART_SEED_STRIDE`` further on."""


class ActorWorkerError(RuntimeError):
    """An actor worker died or its env raised, and the pool may not restart (again).

    Attributes:
        worker: the worker's index.
        cause: what ended it (the exception it raised, or the signal or exit code).
    """

    def __init__(self, worker: int, cause: str, detail: str = ""):
        self.worker, self.cause = worker, cause
        super().__init__(f"actor worker {worker} failed: {cause}{detail}")


def make_worker_env(env_name: str, envs_per_worker: int, seed: int, library: str | None = None,
                    lean: bool = True, env_modules: tuple[str, ...] = (),
                    env_options: dict[str, Any] | None = None) -> EnvBase:
    """One worker's environments, stepped with one policy call per step for all of them.

    It runs in the worker's process (a local actor process or a Ray actor), which first
    imports ``env_modules`` (``env.module``): a suite of one's own registers itself there.
    With ``lean`` (``actors.lean_envs``) and a suite that has raw envs (dm_control,
    gymnasium), a :class:`~actorq.envs.batched.LeanBatchedEnv`: unbatched for one env,
    ``batch_size=[envs_per_worker]`` otherwise. Else today's TorchRL path: a single
    :func:`~actorq.envs.make_env` env, or a ``SerialEnv`` of several. ``env_options``
    (``env.options``) are the suite's options, as every env of the run has them.
    """
    import_suites(env_modules)
    if lean:
        env = make_batched_env(env_name, None if envs_per_worker == 1 else envs_per_worker,
                               seed=seed, library=library, options=env_options)
        if env is not None:
            return env
    if envs_per_worker == 1:
        return make_env(env_name, seed=seed, library=library, options=env_options)
    return SerialEnv(envs_per_worker, partial(make_env, env_name, seed=seed, library=library, options=env_options))


def check_frames_done(frames_done: int, total_frames: int) -> None:
    """Raises ``ValueError`` unless a resumed run has frames left to collect. The ``actors.*``
    keys themselves are checked with the run config (:mod:`actorq.run.checks`)."""
    if not 0 <= frames_done < total_frames:
        raise ValueError(f"frames_done must be in [0, total_frames={total_frames}), got {frames_done}")


@dataclass(frozen=True)
class ActorSpec:
    """What an actor pool collects, whatever its backend: the ``actors`` config group's shared
    keys (checked with the run config, :mod:`actorq.run.checks`), plus what the experience
    pipeline adds at the start (the env, the seed, the frames a resumed run already has).

    Args:
        env_name: environment for :func:`actorq.envs.make_env`.
        num_workers: actor processes (or Ray actors).
        frames_per_batch: env steps per batch of one worker (all its envs together).
        total_frames: stop after this many env steps in total.
        envs_per_worker: environments stepped in lock-step inside each worker.
        init_random_frames: the first frames use uniformly random actions.
        seed: base seed; worker ``i`` gets a distinct derived seed, and env ``j`` of a
            worker the ``j``-th seed of TorchRL's chain from it.
        library: the environment suite (``env.library``); ``None`` looks the name up.
        lean_envs: step each worker's envs through the lean batched env
            (:mod:`actorq.envs.batched`) where the suite supports it; ``False`` keeps the
            TorchRL transform stack (a ``SerialEnv`` for several envs per worker).
        restart_on_failure: restart the workers when one fails (else raise at once).
        max_restarts: restarts allowed in one run; the next failure raises.
        frames_done: frames a resumed run collected before its checkpoint: the workers
            collect only ``total_frames - frames_done`` more (random actions only for what
            is left of ``init_random_frames``), while ``len()`` still counts the batches of
            the whole run, as the resumed trainer's batch counters do.
        env_modules: modules each worker imports before it builds its envs (``env.module``:
            those registering a suite of one's own).
        env_options: the suite's options (``env.options``) each worker builds its envs with.
        collection: ``"async"`` or ``"lockstep"`` (:data:`COLLECTIONS`).
        waiting_batches: in asynchronous collection, how many batches the workers handed over
            may wait for the learner before a worker waits too (``None``: one per worker).
            Every waiting batch is one more policy version a later batch may lag the learner
            by; an on-policy learner's pipeline asks for 0: each worker collects its next
            batch while the learner trains on its last, one version behind.
        gather: in asynchronous collection, how many workers' batches make one batch for the
            learner, taken as they arrive and merged as a lock-step round is
            (:func:`gather_rounds`). 1 (or ``None``): each worker's batch as it arrives.
        cores: worker ``i`` runs pinned to core ``cores[i % len(cores)]`` with one torch
            thread (``actors.cores``; Linux); ``None``: where the OS puts it.

    Example:
        >>> spec = ActorSpec("CartPole-v1", num_workers=2, frames_per_batch=100, total_frames=1_000,
        ...                  collection="lockstep")
        >>> spec.batch_frames  # a lock-step round: one batch of every worker
        200
    """

    env_name: str
    num_workers: int = 1
    frames_per_batch: int = 256
    total_frames: int = 50_000
    envs_per_worker: int = 1
    init_random_frames: int = 0
    seed: int = 0
    library: str | None = None
    lean_envs: bool = True
    restart_on_failure: bool = True
    max_restarts: int = 3
    frames_done: int = 0
    env_modules: tuple[str, ...] = ()
    env_options: dict[str, Any] = field(default_factory=dict)
    collection: str = "async"
    waiting_batches: int | None = None
    gather: int | None = 1
    cores: tuple[int, ...] | None = None

    def __post_init__(self):
        check_frames_done(self.frames_done, self.total_frames)
        object.__setattr__(self, "cores", None if self.cores is None else tuple(self.cores))
        object.__setattr__(self, "gather", 1 if self.gather is None else self.gather)
        if self.collection not in COLLECTIONS:
            raise ValueError(f"collection must be one of {list(COLLECTIONS)}, got {self.collection!r}")
        if not 1 <= self.gather <= self.num_workers:
            raise ConfigError(f"actors.gather must be between 1 and actors.num_workers={self.num_workers}, "
                              f"got {self.gather}")
        if self.gather > 1 and self.collection != "async":
            raise ConfigError(f"actors.gather={self.gather} needs actors.collection=async: a lock-step round "
                              "holds every worker's batch already")
        object.__setattr__(self, "env_modules", tuple(self.env_modules))

    @property
    def batch_frames(self) -> int:
        """Frames in each batch a pool yields (:func:`batch_frames`)."""
        return batch_frames(self.frames_per_batch, self.num_workers, self.collection, self.gather)

    def worker_env(self) -> partial:
        """Builds one worker's envs (:func:`make_worker_env`), in the worker's process."""
        return partial(make_worker_env, self.env_name, self.envs_per_worker, self.seed, self.library,
                       self.lean_envs, self.env_modules, self.env_options)


def batch_frames(frames_per_batch: int, num_workers: int, collection: str, gather: int = 1) -> int:
    """Frames in each batch a pool yields: ``gather`` workers' batches (one unless asked), or
    in lock-step collection one round of every worker's.

    >>> batch_frames(100, 4, "lockstep"), batch_frames(100, 4, "async"), batch_frames(100, 4, "async", 2)
    (400, 100, 200)
    """
    return frames_per_batch * (num_workers if collection == "lockstep" else gather)


def gather_rounds(batches: Iterator[TensorDictBase], size: int) -> Iterator[TensorDictBase]:
    """Asynchronous batches merged ``size`` at a time, in the order they arrive (what is left
    at the end goes out as a smaller round).

    A worker ahead of the others may have two batches in one round: each row gets
    ``segment``, the number of its worker's batches before its own in the round, so that
    what reads a worker's rows in order (the reward scaler's running returns, the recorded
    log-prob check's batches) can tell them apart.

    >>> from tensordict import TensorDict
    >>> def batch(worker): return TensorDict({"worker": torch.full((1, 3), worker)}, [1, 3])
    >>> [r["segment"][:, 0].tolist() for r in gather_rounds(iter([batch(0), batch(1), batch(0), batch(0)]), 3)]
    [[0, 0, 1], [0]]
    """
    round_: list[TensorDictBase] = []
    for batch in batches:
        round_.append(batch)
        if len(round_) == size:
            yield merge_rows(_numbered_segments(round_))
            round_ = []
    if round_:
        yield merge_rows(_numbered_segments(round_))


def _numbered_segments(batches: list[TensorDictBase]) -> list[TensorDictBase]:
    """Each batch with ``segment``: how many batches of its worker come before it."""
    seen: dict[int, int] = {}
    numbered = []
    for batch in batches:
        worker = int(batch["worker"].reshape(-1)[0])
        segment = seen.get(worker, 0)
        seen[worker] = segment + 1
        numbered.append(batch.set("segment", torch.full(batch.shape, segment, dtype=torch.int64)))
    return numbered


def merge_rows(batches: list[TensorDictBase]) -> TensorDictBase:
    """Workers' batches as one ``[envs, T]`` batch (each worker's envs in turn; a worker of
    one env contributes one row).

    Example:
        >>> from tensordict import TensorDict
        >>> one, two = TensorDict({"r": torch.zeros(5)}, [5]), TensorDict({"r": torch.ones(2, 5)}, [2, 5])
        >>> merge_rows([one, two]).shape
        torch.Size([3, 5])
    """
    rows = [batch.unsqueeze(0) if batch.ndim == 1 else batch for batch in batches]
    return torch.cat(rows, 0) if len(rows) > 1 else rows[0]


class ActorPoolBase:
    """The base of the actor pools: the :class:`ActorSpec` every pool collects, the worker env
    it describes, the frame budget and the restart policy.

    Args:
        spec: what the pool collects.
        policy: the actor-side policy; a copy lives in every worker.

    Attributes:
        spec: the :class:`ActorSpec`.
        frames: frames yielded so far, counting a resumed run's ``frames_done``.
        restarts: how many times workers were restarted after a failure.
    """

    def __init__(self, spec: ActorSpec, policy: nn.Module):
        self.spec = spec
        # TorchRL syncs a TensorDictModule's weights; our policy is its ``module``. It writes
        # what the learner asked the actors to record beside the action.
        records = tuple(getattr(policy, "records", ()))
        self.policy = TensorDictModule(policy, in_keys=[OBSERVATION], out_keys=["action", *records])
        self.env_fn = spec.worker_env()
        self.frames = spec.frames_done
        self.restarts = 0
        self._weights = None  # the last pushed, for restarts

    def __len__(self) -> int:
        return -(-self.spec.total_frames // self.spec.batch_frames)

    @property
    def restart_seed(self) -> int:
        """The base seed of the workers started now (a restart's differ from the last ones)."""
        return self.spec.seed + RESTART_SEED_STRIDE * self.restarts

    @property
    def can_restart(self) -> bool:
        """Whether a failed worker may be restarted now."""
        return self.spec.restart_on_failure and self.restarts < self.spec.max_restarts

    def refuse_restart(self, worker: int, cause: str) -> None:
        """Raises :class:`ActorWorkerError` for ``worker`` unless a restart is allowed now."""
        if not self.spec.restart_on_failure:
            raise ActorWorkerError(worker, cause, " (actors.restart_on_failure=false)") from None
        if self.restarts >= self.spec.max_restarts:
            raise ActorWorkerError(worker, cause,
                                   f" (after {self.restarts} restarts; actors.max_restarts={self.spec.max_restarts})") from None
