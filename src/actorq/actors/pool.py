"""Actors: TorchRL collectors in worker processes, each running an :class:`ExplorationPolicy`.

This is the only module that imports TorchRL collectors.

Example:
    >>> from actorq.actors.policy import ExplorationPolicy
    >>> from actorq.envs import EnvSpec
    >>> from actorq.networks import QNetwork
    >>> spec = EnvSpec(obs_dim=4, discrete=True, num_actions=2)
    >>> policy = ExplorationPolicy(QNetwork(spec, (16,)), spec, noise_scale=0.1)
    >>> pool = ActorPool("CartPole-v1", policy, num_workers=1, frames_per_batch=100, total_frames=300)
    >>> try:
    ...     shapes = [tuple(batch.shape) for batch in pool]  # one TensorDict of steps per batch
    ...     pool.push(policy)  # copies the policy's parameters and buffers into every worker
    ... finally:
    ...     pool.shutdown()
    >>> shapes
    [(100,), (100,), (100,)]

With a ``writer`` (an :class:`~actorq.replay.experience.ExperienceWriter` over a shared
replay) the workers store their batches themselves and iteration yields :data:`WRITTEN`
once per batch written (``tests/component/test_replay_in_training.py`` runs it).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING

from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import MultiAsyncCollector
from torchrl.envs import EnvBase, SerialEnv

from actorq.envs import OBSERVATION, make_env
from actorq.envs.batched import make_batched_env

if TYPE_CHECKING:
    from actorq.replay.experience import ExperienceWriter


class Written:
    """What :class:`ActorPool` yields for a batch that a worker wrote into the replay itself.

    Lightning skips ``training_step`` for a ``None`` batch (what TorchRL collectors yield
    then), so the pool yields this marker instead.
    """

    def __repr__(self) -> str:
        return "WRITTEN"


WRITTEN = Written()


def make_worker_env(env_name: str, envs_per_worker: int, seed: int, library: str | None = None,
                    lean: bool = True) -> EnvBase:
    """One worker's environments, stepped with one policy call per step for all of them.

    With ``lean`` (``actors.lean_envs``) and a suite that has raw envs (dm_control,
    gymnasium), a :class:`~actorq.envs.batched.LeanBatchedEnv`: unbatched for one env,
    ``batch_size=[envs_per_worker]`` otherwise. Else today's TorchRL path: a single
    :func:`~actorq.envs.make_env` env, or a ``SerialEnv`` of several.
    """
    if lean:
        env = make_batched_env(env_name, None if envs_per_worker == 1 else envs_per_worker,
                               seed=seed, library=library)
        if env is not None:
            return env
    if envs_per_worker == 1:
        return make_env(env_name, seed=seed, library=library)
    return SerialEnv(envs_per_worker, partial(make_env, env_name, seed=seed, library=library))


class ActorPool:
    """``num_workers`` actor processes collecting concurrently with the learner.

    Iterating yields one worker's batch at a time (``frames_per_batch`` steps), while that
    worker already collects its next batch. Weights reach the workers through :meth:`push`.

    Args:
        env_name: environment for :func:`actorq.envs.make_env`.
        policy: the actor-side policy; a copy lives in every worker.
        num_workers: number of actor processes.
        envs_per_worker: environments stepped in lock-step inside each worker.
        frames_per_batch: env steps per yielded batch (all envs of one worker together).
        total_frames: stop after this many env steps in total.
        init_random_frames: the first frames use uniformly random actions.
        seed: base seed; worker ``i`` gets a distinct derived seed, and env ``j`` of a
            worker the ``j``-th seed of TorchRL's chain from it.
        library: the environment suite (``env.library``); ``None`` looks the name up.
        writer: when given, each worker writes its batches through it (an
            :class:`~actorq.replay.experience.ExperienceWriter` over a shared replay) and
            iteration yields :data:`WRITTEN` for each batch written, until ``total_frames``
            frames have been written.
        lean_envs: step each worker's envs through the lean batched env
            (:mod:`actorq.envs.batched`) where the suite supports it; ``False`` keeps the
            TorchRL transform stack (a ``SerialEnv`` for several envs per worker).
        frames_done: frames a resumed run collected before its checkpoint: the workers
            collect only ``total_frames - frames_done`` more (random actions only for what
            is left of ``init_random_frames``), while ``len()`` still counts the batches of
            the whole run, as the resumed trainer's batch counters do.
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
        writer: ExperienceWriter | None = None,
        lean_envs: bool = True,
        frames_done: int = 0,
    ):
        for name, value in (("num_workers", num_workers), ("envs_per_worker", envs_per_worker),
                            ("frames_per_batch", frames_per_batch), ("total_frames", total_frames)):
            if value <= 0:
                raise ValueError(f"actors.{name} must be positive, got {value}")
        if not 0 <= frames_done < total_frames:
            raise ValueError(f"frames_done must be in [0, total_frames={total_frames}), got {frames_done}")
        if init_random_frames < 0:
            raise ValueError(f"actors.init_random_frames must be >= 0, got {init_random_frames}")
        # TorchRL syncs a TensorDictModule's weights; our policy is its ``module``.
        self.policy = TensorDictModule(policy, in_keys=[OBSERVATION], out_keys=["action"])
        env_fn = partial(make_worker_env, env_name, envs_per_worker, seed, library, lean_envs)
        self.collector = MultiAsyncCollector(
            [env_fn] * num_workers,
            self.policy,
            frames_per_batch=frames_per_batch,
            total_frames=total_frames - frames_done,
            init_random_frames=max(0, init_random_frames - frames_done),
            split_trajs=False,
            replay_buffer=writer,
        )
        self.collector.set_seed(seed)
        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.frames_done = frames_done
        self.writer = writer

    def __iter__(self) -> Iterator[TensorDictBase | Written]:
        for batch in self.collector:
            if batch is not None:
                yield batch
                continue
            # A worker whose marker waits in the collector's queue collects and writes
            # another batch meanwhile, so the frame budget counts what was written.
            last = self.writer.write_count >= self.total_frames - self.frames_done
            yield WRITTEN
            if last:
                return

    def __len__(self) -> int:
        return -(-self.total_frames // self.frames_per_batch)

    def push(self, policy: nn.Module) -> None:
        """Copies ``policy``'s parameters and buffers into every worker's policy."""
        weights = TensorDict({"module": TensorDict.from_module(policy)}, batch_size=[])
        self.collector.update_policy_weights_(weights)

    def shutdown(self) -> None:
        self.collector.shutdown()
