"""The worker's rollout over a lean batched env: per step one policy call and one numpy
env step, and ONE TensorDict per batch.

TorchRL's ``Collector.rollout`` builds, updates and stacks a TensorDict every step (the
carrier, the policy's TensorDictModule wrapper, ``"next"``, trajectory ids), which cost
more than a cheap simulator's step. :class:`LeanCollector` is TorchRL's ``Collector``
(worker loop, weight sync, hand-over, frame counting, random frames all stay TorchRL's)
whose ``rollout`` fills preallocated numpy arrays instead when it drives a
:class:`~actorq.envs.batched.LeanBatchedEnv`, and returns a batch with exactly the keys,
shapes, dtypes and values TorchRL's own rollout returns for that env
(``tests/unit/test_lean_rollout.py`` compares them on the same seeds). Either way, where the
policy records its worker, every step records it, the random frames' too (TorchRL's rollout
leaves what the policy did not record in them zero).

Example:
    >>> from tensordict.nn import TensorDictModule
    >>> from actorq.actors.policy import ExplorationPolicy
    >>> from actorq.envs import EnvSpec
    >>> from actorq.envs import make_batched_env
    >>> from actorq.algos.networks import QNetwork
    >>> spec = EnvSpec(obs_dim=4, discrete=True, num_actions=2)
    >>> policy = TensorDictModule(ExplorationPolicy(QNetwork(spec, (16,)), spec, noise_scale=0.1),
    ...                           in_keys=["observation"], out_keys=["action"])
    >>> env = make_batched_env("CartPole-v1", num_envs=4, seed=0, library="gymnasium")
    >>> collector = LeanCollector(env, policy, frames_per_batch=40, total_frames=80,
    ...                           auto_register_policy_transforms=False)
    >>> [tuple(batch.shape) for batch in collector]  # [envs, steps]
    [(4, 10), (4, 10)]
    >>> collector.shutdown()
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.collectors import Collector

from actorq.actors.processes import recorded_worker
from actorq.util import torchrl_adapter as adapter
from actorq.envs.batched import EPISODE_REWARD, LeanBatchedEnv, StepArrays
from actorq.envs.raw import RawEnvs
from actorq.envs.spec import OBSERVATION


class LeanCollector(Collector):
    """TorchRL's ``Collector`` with a lean :meth:`rollout` where it drives a
    :class:`~actorq.envs.batched.LeanBatchedEnv` on the CPU (any other env, or a replay
    buffer written step by step, takes TorchRL's own rollout). Setting ``lean_rollout`` to
    ``False`` takes TorchRL's rollout everywhere (the benchmark's before/after)."""

    lean_rollout: bool = True

    def rollout(self) -> TensorDictBase:
        if not self._lean():
            return _with_worker(super().rollout())
        with torch.no_grad():
            return _with_worker(adapter.finish_rollout(self, self._lean_rollout()))

    def _lean(self) -> bool:
        return (self.lean_rollout and isinstance(self.env, LeanBatchedEnv) and adapter.rollout_is_plain(self))

    def _lean_rollout(self) -> TensorDict:
        env: LeanBatchedEnv = self.env
        n, steps = env.num_envs, self.frames_per_batch
        spec = env.action_spec
        action_shape = spec.shape[len(env.batch_size):]
        policy = adapter.policy_module(self)
        records = {name: _record_shape(policy, name) for name in getattr(policy, "records", ())}
        buffers = _Buffers(n, steps, env.raw, action_shape, spec.dtype, records)
        traj_ids = adapter.current_traj_ids(self).reshape(n).clone()
        traj_ids_array = traj_ids.numpy()  # the same memory; numpy's copy from a tensor is slow
        obs = env.observation
        for t in range(steps):
            buffers.obs[:, t] = obs
            buffers.episode_reward[:, t] = env.episode_reward
            buffers.traj_ids[:, t] = traj_ids_array
            if adapter.random_frames_now(self):
                action = spec.rand()
            else:
                action = policy(torch.from_numpy(obs) if env.batched else torch.from_numpy(obs[0]))
                if records:  # (action, *records), as the learner asked
                    action, recorded = action[0], action[1:]
                    for array, value in zip(buffers.records.values(), recorded):
                        array[:, t] = value.numpy().reshape(n, *array.shape[2:])
            actions = action.numpy().reshape(n, *action_shape)
            buffers.action[:, t] = actions
            step = env.step_numpy(actions)
            buffers.write_next(t, step)
            obs = env.restart_ended(step)
            if step.done.any():
                ended = torch.from_numpy(step.done[:, 0])
                traj_ids[ended] = adapter.new_traj_ids(self, int(ended.sum()))
        adapter.set_current_traj_ids(self, traj_ids)
        return buffers.tensordict(env.batched)


def _with_worker(batch: TensorDictBase | None) -> TensorDictBase | None:
    """``batch`` with this process's worker (:func:`~actorq.actors.processes.recorded_worker`)
    as every step's ``"worker"`` record, where the policy records one: the random frames'
    too, which the policy does not act in (so records nothing), but which this worker took.
    (A batch written into the replay step by step is ``None``: its transitions keep no worker.)"""
    if batch is not None and "worker" in batch.keys():
        batch.get("worker").fill_(recorded_worker())
    return batch


RECORD_DTYPES = {"log_prob": np.float32, "policy_version": np.int64, "worker": np.int64, "output": np.float32}
"""The dtype of each thing a policy may record (:data:`actorq.actors.policy.RECORDS`)."""


def _record_shape(policy, name: str) -> tuple[int, ...]:
    """The shape of one row's ``name`` record: the policy's output shape for ``"output"``,
    a scalar for the rest."""
    return tuple(policy.output_shape) if name == "output" else ()


class _Buffers:
    """The arrays of one batch, ``[envs, steps, ...]`` (TorchRL's layout: time last)."""

    def __init__(self, n: int, steps: int, raw: RawEnvs, action_shape: torch.Size, action_dtype: torch.dtype,
                 records: dict[str, tuple[int, ...]] | None = None):
        def floats(*shape):
            return np.empty((n, steps, *shape), dtype=np.float32)

        def observations():
            return np.empty((n, steps, *raw.obs_shape), dtype=raw.obs_dtype)

        def flags():
            return np.zeros((n, steps, 1), dtype=bool)

        self.obs, self.episode_reward = observations(), floats(1)
        self.action = torch.empty((n, steps, *action_shape), dtype=action_dtype).numpy()
        self.traj_ids = np.empty((n, steps), dtype=np.int64)
        self.next = StepArrays(observations(), floats(1), floats(1), flags(), flags(), flags())
        # What the policy records with each action (name -> one row's shape); zeros in the
        # random frames it does not act in, as TorchRL's rollout leaves them (but the worker,
        # which the rollout records for every step).
        self.records = {name: np.zeros((n, steps, *shape), dtype=RECORD_DTYPES[name])
                        for name, shape in (records or {}).items()}

    def write_next(self, t: int, step: StepArrays) -> None:
        for array, value in zip(self.next, step):
            array[:, t] = value

    def tensordict(self, batched: bool) -> TensorDict:
        def tensor(array: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(array if batched else array[0])

        false = np.zeros_like(self.next.done)  # a root step never starts ended (restarts happen before it)
        shape = self.traj_ids.shape if batched else self.traj_ids.shape[1:]
        root = {OBSERVATION: tensor(self.obs), EPISODE_REWARD: tensor(self.episode_reward),
                "action": tensor(self.action), **{name: tensor(array) for name, array in self.records.items()},
                "done": tensor(false), "terminated": tensor(false.copy()),
                "truncated": tensor(false.copy()),
                "collector": TensorDict({"traj_ids": tensor(self.traj_ids)}, batch_size=shape),
                "next": TensorDict(self.next.entries(tensor), batch_size=shape)}
        batch = TensorDict(root, batch_size=shape)
        batch.refine_names(..., "time")
        return batch
