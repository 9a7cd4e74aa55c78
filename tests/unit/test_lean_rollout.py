"""The lean rollout returns exactly what TorchRL's own ``Collector.rollout`` returns for the
same lean env, policy and seeds: every key, shape, dtype, value and name, over batches with
episode ends, restarts, new trajectory ids and random frames."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule
from torchrl.collectors import Collector

from actorq.actors.policy import ExplorationPolicy
from actorq.actors.rollout import LeanCollector
from actorq.envs import EnvSpec, make_env
from actorq.envs import make_batched_env
from actorq.algos.networks import DeterministicActor, QNetwork

STEPS = 300  # per env per batch; cheetah-run's episodes are 1000 steps, so batch 4 restarts


def _batches(collector_class, name: str, num_envs: int | None, random_frames: int, batches: int = 4,
             records: tuple[str, ...] = ()):
    torch.manual_seed(0)
    spec = EnvSpec.from_env(make_env(name, seed=0))
    network = QNetwork(spec, (16,)) if spec.discrete else DeterministicActor(spec, (16,))
    policy = TensorDictModule(ExplorationPolicy(network, spec, noise_scale=0.3, records=records),
                              in_keys=["observation"], out_keys=["action", *records])
    env = make_batched_env(name, num_envs, seed=3)
    collector = collector_class(env, policy, frames_per_batch=STEPS * (num_envs or 1), total_frames=-1,
                                init_random_frames=random_frames, auto_register_policy_transforms=False)
    torch.manual_seed(1)  # the same exploration noise and random actions on both sides
    try:
        batches_out = iter(collector)
        return [next(batches_out) for _ in range(batches)]
    finally:
        collector.shutdown()


@pytest.mark.parametrize("name", ["cheetah-run", "CartPole-v1"])
@pytest.mark.parametrize("num_envs", [None, 3])
@pytest.mark.parametrize("random_frames", [0, 700])
def test_lean_rollout_returns_what_torchrl_rollout_returns(name, num_envs, random_frames):
    _assert_the_same(_batches(Collector, name, num_envs, random_frames),
                     _batches(LeanCollector, name, num_envs, random_frames), name)


class TorchRLRollout(LeanCollector):
    """TorchRL's own rollout, as an actor worker runs it where the lean one does not apply."""

    lean_rollout = False


def test_what_the_policy_records_is_what_torchrl_rollout_records_random_frames_included():
    """Off-policy actors' records (the network's output, Q-values here): zeros in the random
    frames, where the policy does not act, but the worker that took them, which is known without it."""
    records = ("output", "policy_version", "worker")
    theirs = _batches(TorchRLRollout, "CartPole-v1", 3, 3 * STEPS, batches=2, records=records)
    ours = _batches(LeanCollector, "CartPole-v1", 3, 3 * STEPS, batches=2, records=records)
    _assert_the_same(theirs, ours, "CartPole-v1")
    assert ours[0]["output"].shape == (3, STEPS, 2)
    assert (ours[0]["output"] == 0).all() and (ours[1]["output"] != 0).all()  # random frames, then the policy's
    assert (ours[0]["worker"] == -1).all() and (ours[1]["worker"] == -1).all()  # not in an actor worker


def _assert_the_same(theirs, ours, name: str) -> None:
    ended = 0
    for their, our in zip(theirs, ours):
        assert set(our.keys(True, True)) == set(their.keys(True, True))
        assert our.batch_size == their.batch_size and our.names == their.names
        for key in their.keys(True, True):
            assert our[key].dtype == their[key].dtype, key
            assert torch.equal(our[key], their[key]), (name, key)
        ended += int(their["next", "done"].sum())
    assert ended >= 1  # the comparison crossed episode ends and restarts
    envs = ours[-1].shape[0] if ours[-1].ndim == 2 else 1
    assert int(ours[-1]["collector", "traj_ids"].max()) >= envs  # new trajectory ids were handed out


def test_other_envs_take_torchrl_rollout():
    """An env that is not lean (TorchRL's transform stack) is collected by TorchRL's rollout."""
    env = make_env("Pendulum-v1", seed=0)
    spec = EnvSpec.from_env(env)
    policy = TensorDictModule(ExplorationPolicy(DeterministicActor(spec, (8,)), spec, noise_scale=0.1),
                              in_keys=["observation"], out_keys=["action"])
    collector = LeanCollector(env, policy, frames_per_batch=20, total_frames=40, auto_register_policy_transforms=False)
    try:
        assert not collector._lean()
        assert [tuple(batch.shape) for batch in collector] == [(20,), (20,)]
    finally:
        collector.shutdown()


def test_within_an_episode_each_steps_next_observation_is_the_next_steps_observation():
    """What PPO's values rely on (one value per frame: ``V(s'_t)`` is ``V(s_{t+1})`` unless
    the episode ended at ``t``): the lean rollout's next observations, across restarts."""
    for batch in _batches(LeanCollector, "CartPole-v1", 3, 0, batches=2):
        going_on = ~batch["next", "done"][:, :-1, 0]
        assert (~going_on).any()  # the batch has episode ends
        assert torch.equal(batch["next", "observation"][:, :-1][going_on], batch["observation"][:, 1:][going_on])
        assert not torch.equal(batch["next", "observation"][:, :-1], batch["observation"][:, 1:])
