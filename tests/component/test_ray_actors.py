"""Ray actors on a real two-node Ray cluster on this machine: a head started with ``ray start
--head`` and a second node joined with ``ray start --address``, holding the only
``actor_node`` resource, so the actors run on another node than the learner."""

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import ray

from actorq.actors.base import ActorSpec
from actorq.actors.ray_pool import RayActorPool
from actorq.train import train
from tests.component.fault_envs import ConstantAction
from tests.conftest import TINY, TINY_ON_POLICY
from tests.helpers import scalars

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
# Ray's token authentication is for clusters reachable from other machines; this one is not.
# The actors unpickle tests.component.fault_envs, and run the actorq of this checkout (src/),
# whichever one the environment has installed.
RAY_ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}


def ray_processes() -> dict[int, psutil.Process]:
    """Every Ray process on this machine: its daemons, agents and workers."""
    found = {}
    for process in psutil.process_iter(["cmdline"]):
        command = " ".join(process.info["cmdline"] or [])
        # multiprocessing's own processes (another test's fork server and the actor workers it
        # forked) list Ray's vendored folder in their sys_path once their process imported Ray.
        if (command.startswith("ray::") or "/ray/" in command or " -m ray." in command) \
                and "from multiprocessing." not in command:
            found[process.pid] = process
    return found


@pytest.fixture(scope="module")
def cluster(monkeypatch_module):
    """The address of a head node (1 CPU) and a second node (2 CPUs, ``actor_node: 2``).
    Afterwards the processes of this cluster, and only those (``ray stop`` would stop every
    Ray cluster of this machine), are stopped, and none is left."""
    for key in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED"):
        monkeypatch_module.setenv(key, RAY_ENV[key])
    before = set(ray_processes())
    address = "127.0.0.1:6389"
    start = [RAY, "start", "--disable-usage-stats"]
    try:
        for command in ([*start, "--head", f"--port={address.split(':')[1]}", "--num-cpus=1", "--include-dashboard=false"],
                        [*start, f"--address={address}", "--num-cpus=2", '--resources={"actor_node": 2}']):
            started = subprocess.run(command, env=RAY_ENV, capture_output=True, text=True, timeout=120)
            assert started.returncode == 0, f"{' '.join(command[1:])}:\n{started.stdout[-2000:]}\n{started.stderr[-2000:]}"
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        ours = [process for pid, process in ray_processes().items() if pid not in before]
        for process in ours:
            process.terminate()
        _, alive = psutil.wait_procs(ours, timeout=10)
        for process in alive:  # Ray's daemons do not all stop on SIGTERM
            process.kill()
        psutil.wait_procs(alive, timeout=10)
    left = [process.info["cmdline"] for pid, process in ray_processes().items() if pid not in before]
    assert not left, left


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def node_of(actor) -> str:
    return ray.get(actor.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id()))


@pytest.mark.timeout(300)
def test_ray_actors_on_another_node_collect_take_pushed_weights_and_survive_a_kill(cluster):
    """Two Ray actors on the second node, two batch requests queued at each: every frame of
    the budget arrives; the weights pushed after the second batch reach each actor exactly
    two batches later (its requests queued before the push run first); an actor killed
    later is replaced, once, by one running those weights, which also takes the dead
    actor's queued requests."""
    # 40 batches: when the machine is busy one actor may deliver most of the first ones, and
    # the kill waits for the other's two batches queued before the push (seen at batch 15).
    pool = RayActorPool(ActorSpec("count", num_workers=2, frames_per_batch=50, total_frames=2000,
                        library="faults"), ConstantAction(1.0), address=cluster, resources={"actor_node": 1})
    assert pool.requests_in_flight == 2
    batches, pushed_after, killed_after = [], None, None  # (worker, action) per batch
    try:
        [actor_node] = [node["NodeID"] for node in ray.nodes() if node["Alive"] and "actor_node" in node["Resources"]]
        head = [node["NodeID"] for node in ray.nodes() if "node:__internal_head__" in node["Resources"]]
        assert head and actor_node not in head
        assert {node_of(worker) for worker in pool.workers} == {actor_node}
        for index, batch in enumerate(pool):
            [action] = batch["action"].unique().tolist()
            batches.append((worker_of(batch), action))
            if index == 1:
                pool.push(ConstantAction(7.0))  # another module: the actors get 7 only from the push
                pushed_after = len(batches)
            old_after_push = pushed_after is not None and [a for _, a in batches[pushed_after:]].count(1.0) == 4
            if killed_after is None and index >= 5 and old_after_push:
                ray.kill(pool.workers[0], no_restart=True)
                killed_after = len(batches)
    finally:
        pool.shutdown()
    assert pool.frames == pool.collected_frames == 2000
    assert pool.restarts == 1 and killed_after is not None, batches
    assert all(action == 1.0 for _, action in batches[:pushed_after]), batches
    for worker in (0, 1):
        after_push = [action for w, action in batches[pushed_after:] if w == worker]
        assert after_push[:2] == [1.0, 1.0] and set(after_push[2:]) == {7.0}, batches
    assert len(batches) - killed_after >= 8, batches
    assert pool.push_bytes == ConstantAction(7.0).value.nbytes


def worker_of(batch) -> int:
    [worker] = batch["observation"][:, 0].long().unique().tolist()
    return worker


@pytest.mark.timeout(300)
def test_asynchronous_actors_keep_delivering_while_one_stalls_and_lock_step_waits_for_it(cluster):
    """Worker 1's env sleeps ``STALL_S`` at its step 60 (in its second batch). Asynchronous
    collection hands over worker 0's batches meanwhile; a lock-step round is one batch of
    every worker (``[workers, T]``), so worker 0 waits."""
    workers = {}
    for sync in (False, True):
        pool = RayActorPool(ActorSpec("stall-w1-s60", num_workers=2, frames_per_batch=50, total_frames=800,
                            library="faults", collection="lockstep" if sync else "async"), ConstantAction(1.0),
                            address=cluster, resources={"actor_node": 1})
        try:
            workers[sync] = [batch["observation"][..., 0].long() for batch in pool]
        finally:
            pool.shutdown()
        assert pool.frames == 800
    assert len(workers[True]) == 8 and all(rows.shape == (2, 50) for rows in workers[True])
    assert all(rows[:, 0].tolist() == [0, 1] and (rows == rows[:, :1]).all() for rows in workers[True])
    order = [int(rows.unique()) for rows in workers[False]]
    longest_run_of_worker_0 = max(len(run) for run in "".join(map(str, order)).split("1"))
    assert longest_run_of_worker_0 >= 5, order


@pytest.mark.timeout(300)
def test_a_run_with_int8_ray_actors_on_another_node_broadcasts_the_int8_payload(cluster, make_cfg, tmp_path):
    """The whole run through ``actors.backend=ray``: the actors on the second node collect
    the budget, and each push puts the int8 payload in the object store, not fp32
    weights (the payload plus the exploration policy's few buffers)."""
    cfg = make_cfg("+experiment=td3_pendulum", *TINY, "quant.bits=8", "callbacks=no_checkpoint",
                   "~callbacks.carbon", "actors.num_workers=2", "actors.backend=ray", f"actors.ray.address={cluster}",
                   "actors.ray.resources={actor_node:1}")
    summary, objects = train(cfg)
    assert summary["status"] == "completed" and summary["frames"] == 600
    pool = objects["experience"].actors
    assert isinstance(pool, RayActorPool) and pool.frames == pool.collected_frames == 600
    payload_bytes = scalars(tmp_path / "tb")["quant/push_bytes"][-1][1]
    fp32_bytes = sum(p.nbytes for p in objects["learner"].behaviour_network.parameters())
    assert payload_bytes <= pool.push_bytes <= payload_bytes + 256
    assert pool.push_bytes < 0.5 * fp32_bytes


@pytest.mark.timeout(300)
@pytest.mark.parametrize("collection", ["lockstep", "async"])
def test_ppo_with_int8_ray_actors_on_another_node(cluster, make_cfg, tmp_path, collection):
    """PPO through ``actors.backend=ray`` with int8 actors recording their log-probabilities.
    Lock-step: each rollout is one round of both actors (2 x 8 envs), every one collected with
    the policy pushed last (lag 0). Asynchronous: each rollout is a round of both actors'
    batches as they arrive (``actors.gather`` defaults to every worker for an on-policy
    learner), trained with V-trace whatever its lag. Both measure the int8 behaviour policy
    (KL > 0)."""
    cfg = make_cfg("+experiment=ppo_cartpole", *TINY_ON_POLICY, "quant.bits=8", "callbacks=no_checkpoint",
                   "~callbacks.carbon", "actors.num_workers=2", "actors.backend=ray", f"actors.collection={collection}",
                   f"actors.ray.address={cluster}", "actors.ray.resources={actor_node:1}")
    summary, objects = train(cfg)
    assert summary["status"] == "completed" and summary["frames"] == 512
    assert isinstance(objects["experience"].actors, RayActorPool)
    correction = summary["behaviour_correction"]
    assert correction["rollouts"] == 2  # 512 frames in rounds of 2 x 128
    assert correction["kl_behaviour"] > 0
    lags = [value for _, value in scalars(tmp_path / "tb")["collect/policy_lag"]]
    assert len(lags) == correction["rollouts"]
    assert (lags == [0, 0]) if collection == "lockstep" else max(lags) <= 4, lags
