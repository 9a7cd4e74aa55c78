"""Actors on a Ray cluster: each actor is a Ray actor running a TorchRL collector over the same
worker env and policy as a local actor process (``actors.backend=ray``, extra ``actorq[ray]``).

The learner keeps ``requests_in_flight`` batch requests queued at each actor, so an actor
starts its next batch the moment it hands one over, and takes whichever batch is ready
first: a slow actor never stalls the others (``collection="lockstep"``: lock-step rounds, one batch of
every actor collected with the weights pushed last, handed over as one batch, each round as
slow as its slowest actor). A push puts the policy's
parameters and buffers (for an int8 actor policy: the int8 payload) in Ray's object store
once and queues a load of them at every actor, behind the batches already asked of it; the
learner does not wait for the loads. Ray actors may live on other machines, so they never
write into the learner's shared-memory replay: the learner stores every batch it receives.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

from actorq.actors.base import ActorPoolBase, ActorSpec, ActorWorkerError, gather_rounds, merge_rows
from actorq.actors.pool import pin_worker, set_worker_index
from actorq.actors.rollout import LeanCollector
from actorq.util.errors import ConfigError

log = logging.getLogger(__name__)


def idle_keys(module: nn.Module) -> list[tuple[str, ...]]:
    """The keys, in ``TensorDict.from_module(module)``, of the buffers no actor reads now: those
    of the precisions the actors' network's version is not at
    (:meth:`actorq.quant.QuantizedNetwork.idle_buffers`)."""
    return [(*prefix.split("."), name) if prefix else (name,)
            for prefix, sub in module.named_modules() if hasattr(sub, "idle_buffers")
            for name in sub.idle_buffers()]

INSTALL_HINT = "actors.backend=ray needs Ray: pip install 'actorq[ray]'"


def import_ray():
    """The ``ray`` module, or a one-line :class:`ConfigError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    return ray


class RolloutWorker:
    """One actor, inside a Ray actor process: a TorchRL collector that hands out one batch of
    ``frames_per_batch`` steps per :meth:`next_batch` call."""

    def __init__(self, env_fn, policy: TensorDictModule, frames_per_batch: int, seed: int, index: int,
                 cores: tuple[int, ...] | None = None):
        torch.set_num_threads(1)
        set_worker_index(index)  # before the env is built, as in a local actor process
        pin_worker(index, cores)  # on this actor's machine: actors.cores names its cores
        self.policy = policy
        self.collector = LeanCollector(env_fn, policy, frames_per_batch=frames_per_batch, total_frames=-1,
                                   split_trajs=False, auto_register_policy_transforms=False)
        self.collector.set_seed(seed)
        self.batches = iter(self.collector)

    def next_batch(self, random_actions: bool) -> TensorDictBase:
        # TorchRL's own worker loop switches random actions per batch the same way.
        self.collector.init_random_frames = float("inf") if random_actions else -1
        # One storage under every field: Ray then pickles one buffer, not a TensorDict of
        # tensors, several times faster (docs/measured/actors.md).
        return next(self.batches).consolidate()

    def load(self, weights: TensorDictBase) -> None:
        weights.to_module(self.policy.module)


class RayActorPool(ActorPoolBase):
    """``num_workers`` Ray actors collecting concurrently with the learner; the same interface
    as :class:`~actorq.actors.pool.ActorPool` (iteration, :meth:`push`, frame accounting).

    Args:
        spec: what to collect (:class:`~actorq.actors.base.ActorSpec`). Its ``collection``:
            ``"lockstep"`` rounds: every actor's batch, collected with the weights pushed last,
            handed over as one batch; the next round is asked for only when the learner asks
            for it (the slowest actor sets the pace); ``"async"`` hands the learner whichever
            batch is ready first.
        policy: the actor-side policy; a copy lives in every actor.
        address: the Ray cluster: ``"local"`` starts one on this machine for the run,
            ``"auto"`` joins the one ``ray start`` runs here, else a cluster's address.
        num_cpus: CPUs Ray reserves for each actor.
        resources: custom Ray resources each actor needs (e.g. ``{"actor_node": 1}`` to
            place the actors on the nodes started with that resource).
        ready_timeout_s: how long to wait for every actor to be placed and built.
        requests_in_flight: batch requests queued at each actor in asynchronous collection
            (RLlib's ``max_requests_in_flight``): with 1 an actor idles for a round trip
            between batches; with more, pushed weights reach an actor that many batches
            later. Lock-step collection has one by definition.

    Attributes:
        frames, collected_frames, dropped_frames, unused_frames, restarts: as for
            :class:`~actorq.actors.pool.ActorPool`. A batch a Ray actor finished waits in
            the object store until taken, so none is dropped; only a failed actor's batch
            in progress is lost, and it never counted as collected.
        push_bytes: bytes the last :meth:`push` put in the object store for the actors.
    """

    def __init__(
        self,
        spec: ActorSpec,
        policy: nn.Module,
        address: str = "local",
        num_cpus: float = 1,
        resources: dict[str, float] | None = None,
        ready_timeout_s: float = 300.0,
        requests_in_flight: int = 2,
    ):
        super().__init__(spec, policy)
        self.ray = import_ray()
        self.lockstep = spec.collection == "lockstep"
        self.requests_in_flight = 1 if self.lockstep else requests_in_flight
        self.collected_frames = 0
        self.dropped_frames = 0
        self.unused_frames = 0
        self.push_bytes = 0
        self._requested = spec.frames_done  # frames asked of the actors, counting those done
        # self._weights (ActorPoolBase): the object ref of the last pushed weights, for restarts
        self._loads: list[tuple[int, Any]] = []  # (actor, load call) of the last push
        self._owns_ray = not self.ray.is_initialized()
        if self._owns_ray:
            local = {"include_dashboard": False} if address == "local" else {}
            self.ray.init(address=address, logging_level=logging.WARNING, **local)
        self._remote = self.ray.remote(RolloutWorker).options(num_cpus=num_cpus, resources=dict(resources or {}))
        self.workers = [self._start(index) for index in range(spec.num_workers)]
        self._pending: dict[Any, tuple[int, bool]] = {}  # batch request -> (actor, random actions)
        try:
            self._wait_until_placed(num_cpus, dict(resources or {}), ready_timeout_s)
        except BaseException:
            self.shutdown()
            raise

    def _wait_until_placed(self, num_cpus: float, resources: dict[str, float], timeout: float) -> None:
        """Waits for every actor to be built; Ray would wait forever for resources that no
        node has, so after ``timeout`` this says what was asked and what the cluster has."""
        ready = [worker.__ray_ready__.remote() for worker in self.workers]
        done, _ = self.ray.wait(ready, num_returns=len(ready), timeout=timeout)
        if len(done) < len(ready):
            raise RuntimeError(
                f"{len(ready) - len(done)} of {len(ready)} Ray actors were not running after {timeout:.0f} s; "
                f"each asks for {num_cpus} CPU and {resources or 'no custom resources'}, "
                f"the cluster has {self.ray.cluster_resources()}"
            )
        self.ray.get(done)  # raises what an actor's constructor raised

    def _start(self, index: int):
        worker = self._remote.remote(self.env_fn, self.policy, self.spec.frames_per_batch,
                                     self.restart_seed + 7919 * index, index, self.spec.cores)
        if self._weights is not None:
            worker.load.remote(self._weights)  # runs before any batch request: actor calls are in order
        return worker

    def __iter__(self) -> Iterator[TensorDictBase]:
        if self.lockstep:
            yield from self._lockstep()
        elif self.spec.gather > 1:
            yield from gather_rounds(self._asynchronous(), self.spec.gather)
        else:
            yield from self._asynchronous()

    def _asynchronous(self) -> Iterator[TensorDictBase]:
        """Each actor's batch as it is ready (:meth:`__iter__`)."""
        for _ in range(self.requests_in_flight):
            for index in range(self.spec.num_workers):
                self._request(index)
        while self._pending:  # whichever batch is ready first
            [request], _ = self.ray.wait(list(self._pending), num_returns=1)
            index, random_actions = self._pending.pop(request)
            batch = self._collect(request, index, random_actions)
            self._request(index)
            yield batch

    def _lockstep(self) -> Iterator[TensorDictBase]:
        """Rounds of every actor's batch, each yielded as one batch ``[envs, T]``. A round is
        asked for when the learner asks for its batch, after it trained on the last round and
        pushed: the push's loads run before the round's requests at every actor (an actor runs
        its calls in order), so every batch of a round is collected with the weights pushed
        last."""
        while True:
            for index in range(self.spec.num_workers):
                self._request(index)
            if not self._pending:
                return
            round_ = list(self._pending.items())
            self._pending.clear()
            yield merge_rows([self._collect(request, *asked) for request, asked in round_])

    def _request(self, index: int) -> None:
        """Asks actor ``index`` for its next batch, unless the batches asked for already
        cover the frame budget."""
        if self._requested >= self.spec.total_frames:
            return
        random_actions = self._requested < self.spec.init_random_frames
        self._requested += self.spec.frames_per_batch
        self._pending[self.workers[index].next_batch.remote(random_actions)] = (index, random_actions)

    def _collect(self, request, index: int, random_actions: bool) -> TensorDictBase:
        """The batch ``request`` asked actor ``index`` for, counted; if the actor failed, it
        is replaced (or :class:`ActorWorkerError` raised) and the new one asked instead."""
        while True:
            try:
                batch = self.ray.get(request)
                break
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.RayTaskError) as error:
                request = self._replace(index, error, random_actions)
        self.collected_frames += batch.numel()
        self.frames += batch.numel()
        return batch

    def _replace(self, index: int, error: Exception, random_actions: bool):
        """Restarts failed actor ``index`` (:meth:`_recover`) and asks the new one for the
        failed request's batch, then for the batches still queued at the dead one, in order."""
        queued = [random for actor, random in self._pending.values() if actor == index]
        self._pending = {request: asked for request, asked in self._pending.items() if asked[0] != index}
        self._recover(index, error)
        request = self.workers[index].next_batch.remote(random_actions)
        for random in queued:
            self._pending[self.workers[index].next_batch.remote(random)] = (index, random)
        return request

    def _recover(self, index: int, error: Exception) -> None:
        """Replaces a failed actor with a fresh one running the last pushed weights, or
        raises :class:`ActorWorkerError`."""
        cause = _cause(error)
        self.ray.kill(self.workers[index], no_restart=True)
        self.refuse_restart(index, cause)
        self.restarts += 1
        log.warning("actor worker %d failed (%s); restarting it with the current weights (restart %d of at "
                    "most %d)", index, cause, self.restarts, self.spec.max_restarts)
        self.workers[index] = self._start(index)

    def push(self, policy: nn.Module) -> None:
        """Puts ``policy``'s parameters and buffers (those its version reads) in the object store once and queues a load
        of them at every actor, behind the batches already asked of it; returns without waiting
        for the loads, once the previous push's have run (:meth:`wait_for_loads`)."""
        self.wait_for_loads()
        # Buffers of the precisions the version is not at (the divergence budget's) stay home.
        weights = TensorDict.from_module(policy).exclude(*idle_keys(policy)).clone()
        self.push_bytes = sum(tensor.nbytes for tensor in weights.values(True, True))
        self._weights = self.ray.put(weights)
        self._loads = [(index, worker.load.remote(self._weights)) for index, worker in enumerate(self.workers)]

    def wait_for_loads(self) -> None:
        """Returns once every live actor has loaded the last pushed weights. A dead actor does
        not hang it: the iteration restarts that actor with these weights (or, without
        restarts left, this raises :class:`ActorWorkerError`)."""
        loads, self._loads = self._loads, []
        for index, load in loads:
            try:
                self.ray.get(load)
            except self.ray.exceptions.RayActorError as error:
                if not self.can_restart:
                    raise ActorWorkerError(index, _cause(error)) from None

    def shutdown(self) -> None:
        """Stops the actors (and the Ray instance the pool started); safe to call twice."""
        if not self.workers:
            return
        for request in self._pending:
            self.ray.cancel(request, force=True)
        self._pending.clear()
        self._loads = []
        for worker in self.workers:
            self.ray.kill(worker, no_restart=True)
        self.workers = []
        if self._owns_ray:
            self.ray.shutdown()


def _cause(error: Exception) -> str:
    """One line on what ended a Ray actor or its call: the exception its env raised, else
    Ray's first line about the actor's death."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, Exception):
        return f"{type(cause).__name__}: {cause}"
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
