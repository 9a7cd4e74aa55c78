"""What both actor pools take from :class:`~actorq.actors.base.ActorPoolBase`: the argument
checks, the frame budget, the seeds of restarted workers and the restart policy (no worker
is started here; tests/component/test_actor_faults.py and test_ray_actors.py run the pools)."""

from __future__ import annotations

import pytest
from torch import nn

from actorq.actors.base import ActorSpec
from actorq.actors.base import ActorPoolBase, ActorWorkerError
from actorq.actors.pool import ActorPool
from actorq.actors.ray_pool import RayActorPool


def _pool(**kwargs) -> ActorPoolBase:
    args = {"num_workers": 2, "frames_per_batch": 100, "total_frames": 1_050, "seed": 5} | kwargs
    return ActorPoolBase(ActorSpec("CartPole-v1", **args), nn.Linear(4, 2))


def test_both_pools_are_one_base():
    assert issubclass(ActorPool, ActorPoolBase) and issubclass(RayActorPool, ActorPoolBase)


def test_budget_counts_a_resumed_runs_frames():
    pool = _pool(frames_done=300)
    assert len(pool) == 11  # batches of the whole run, the last one partial
    assert pool.frames == 300


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"frames_done": 1_050}, "frames_done must be in [0, total_frames=1050), got 1050"),
    ({"frames_done": -1}, "frames_done must be in [0, total_frames=1050), got -1"),
])
def test_a_resume_with_no_frames_left_is_refused(kwargs, message):
    """The actors.* keys are checked with the run config (actorq.run.checks); what a pool checks
    itself is the frames a resumed run has done, which no key carries."""
    with pytest.raises(ValueError) as raised:
        _pool(**kwargs)
    assert str(raised.value) == message


def test_restarted_workers_get_new_seeds():
    pool = _pool()
    seeds = []
    for restarts in range(3):
        pool.restarts = restarts
        seeds.append(pool.restart_seed)
    assert seeds[0] == 5 and len(set(seeds)) == 3


def test_restarts_until_max_restarts_then_refuses():
    pool = _pool(max_restarts=1)
    assert pool.can_restart
    pool.refuse_restart(1, "killed by signal SIGKILL")  # allowed: returns
    pool.restarts = 1
    assert not pool.can_restart
    with pytest.raises(ActorWorkerError) as raised:
        pool.refuse_restart(1, "killed by signal SIGKILL")
    assert str(raised.value) == ("actor worker 1 failed: killed by signal SIGKILL "
                                 "(after 1 restarts; actors.max_restarts=1)")
    assert raised.value.worker == 1


def test_no_restart_when_restarts_are_off():
    pool = _pool(restart_on_failure=False)
    assert not pool.can_restart
    with pytest.raises(ActorWorkerError, match=r"worker 0 failed: boom \(actors.restart_on_failure=false\)"):
        pool.refuse_restart(0, "boom")
