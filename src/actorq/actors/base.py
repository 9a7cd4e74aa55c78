"""What the local actor pool (:class:`~actorq.actors.pool.ActorPool`) and the Ray actor pool
(:class:`~actorq.actors.ray_pool.RayActorPool`) share: their arguments,
the worker env, the frame budget and the restart policy.

Example:
    >>> from torch import nn
    >>> pool = ActorPoolBase("CartPole-v1", nn.Linear(4, 2), num_workers=2, frames_per_batch=100,
    ...                      total_frames=1_000, max_restarts=1)
    >>> len(pool), pool.can_restart  # batches in the run; a failed worker may restart
    (10, True)
    >>> pool.restarts = 1
    >>> pool.can_restart
    False
"""

from __future__ import annotations

from functools import partial

from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.envs import EnvBase, SerialEnv

from actorq.envs import OBSERVATION, import_suites, make_env
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
                    lean: bool = True, env_modules: tuple[str, ...] = ()) -> EnvBase:
    """One worker's environments, stepped with one policy call per step for all of them.

    It runs in the worker's process (a local actor process or a Ray actor), which first
    imports ``env_modules`` (``env.module``): a suite of one's own registers itself there.
    With ``lean`` (``actors.lean_envs``) and a suite that has raw envs (dm_control,
    gymnasium), a :class:`~actorq.envs.batched.LeanBatchedEnv`: unbatched for one env,
    ``batch_size=[envs_per_worker]`` otherwise. Else today's TorchRL path: a single
    :func:`~actorq.envs.make_env` env, or a ``SerialEnv`` of several.
    """
    import_suites(env_modules)
    if lean:
        env = make_batched_env(env_name, None if envs_per_worker == 1 else envs_per_worker,
                               seed=seed, library=library)
        if env is not None:
            return env
    if envs_per_worker == 1:
        return make_env(env_name, seed=seed, library=library)
    return SerialEnv(envs_per_worker, partial(make_env, env_name, seed=seed, library=library))


def check_frames_done(frames_done: int, total_frames: int) -> None:
    """Raises ``ValueError`` unless a resumed run has frames left to collect. The ``actors.*``
    keys themselves are checked with the run config (:mod:`actorq.run.checks`)."""
    if not 0 <= frames_done < total_frames:
        raise ValueError(f"frames_done must be in [0, total_frames={total_frames}), got {frames_done}")


class ActorPoolBase:
    """The base of the actor pools: the arguments every pool takes, the worker env
    they describe, the frame budget and the restart policy; see :class:`~actorq.actors.pool.ActorPool` for
    each argument.

    Attributes:
        frames: frames yielded so far, counting a resumed run's ``frames_done``.
        restarts: how many times workers were restarted after a failure.
    """

    def __init__(
        self,
        env_name: str,
        policy: nn.Module,
        num_workers: int,
        frames_per_batch: int,
        total_frames: int,
        envs_per_worker: int = 1,
        init_random_frames: int = 0,
        seed: int = 0,
        library: str | None = None,
        lean_envs: bool = True,
        restart_on_failure: bool = True,
        max_restarts: int = 3,
        frames_done: int = 0,
        env_modules: tuple[str, ...] = (),
        collection: str = "async",
    ):
        check_frames_done(frames_done, total_frames)
        if collection not in COLLECTIONS:
            raise ValueError(f"collection must be one of {list(COLLECTIONS)}, got {collection!r}")
        self.collection = collection
        # TorchRL syncs a TensorDictModule's weights; our policy is its ``module``. It writes
        # what the learner asked the actors to record beside the action.
        records = tuple(getattr(policy, "records", ()))
        self.policy = TensorDictModule(policy, in_keys=[OBSERVATION], out_keys=["action", *records])
        self.env_fn = partial(make_worker_env, env_name, envs_per_worker, seed, library, lean_envs,
                              tuple(env_modules))
        self.num_workers = num_workers
        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.init_random_frames = init_random_frames
        self.seed = seed
        self.frames_done = frames_done
        self.restart_on_failure = restart_on_failure
        self.max_restarts = max_restarts
        self.frames = frames_done
        self.restarts = 0
        self._weights = None  # the last pushed, for restarts

    def __len__(self) -> int:
        return -(-self.total_frames // self.batch_frames)

    @property
    def batch_frames(self) -> int:
        """Frames in each batch the iteration yields: one worker's batch, or in lock-step
        collection one round of every worker's."""
        return self.frames_per_batch * (self.num_workers if self.collection == "lockstep" else 1)

    @property
    def restart_seed(self) -> int:
        """The base seed of the workers started now (a restart's differ from the last ones)."""
        return self.seed + RESTART_SEED_STRIDE * self.restarts

    @property
    def can_restart(self) -> bool:
        """Whether a failed worker may be restarted now."""
        return self.restart_on_failure and self.restarts < self.max_restarts

    def refuse_restart(self, worker: int, cause: str) -> None:
        """Raises :class:`ActorWorkerError` for ``worker`` unless a restart is allowed now."""
        if not self.restart_on_failure:
            raise ActorWorkerError(worker, cause, " (actors.restart_on_failure=false)") from None
        if self.restarts >= self.max_restarts:
            raise ActorWorkerError(worker, cause,
                                   f" (after {self.restarts} restarts; actors.max_restarts={self.max_restarts})") from None
