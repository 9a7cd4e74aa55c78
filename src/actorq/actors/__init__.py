"""Actors: the pool of workers that run the actors' policy in their envs, on this machine
(``actors.backend=process``) or on a Ray cluster (``actors.backend=ray``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

# Nothing heavy at import: the command line's config checks read actorq.actors.processes, and
# `actorq --help` or a bad override must not wait for torch and TorchRL to import.
if TYPE_CHECKING:
    from torch import nn

    from actorq.data.writer import TransitionWriter


def actor_pool(policy: nn.Module, backend: str = "process", ray: Mapping[str, Any] | None = None,
               collection: str = "async", writer: TransitionWriter | None = None, **kwargs: Any):
    """The actor pool ``actors.backend`` names, built from the ``actors`` config group (its
    keys are checked with the run config, :mod:`actorq.run.checks`).

    Args:
        policy: the actors' policy (a copy in every worker).
        backend: ``"process"``: :class:`~actorq.actors.pool.ActorPool`, worker processes on
            this machine; ``"ray"``: :class:`~actorq.actors.ray_pool.RayActorPool`, Ray actors.
        ray: ``address``, ``num_cpus``, ``resources`` and ``requests_in_flight`` for the Ray
            backend (``actors.ray``).
        collection: ``"async"`` or ``"lockstep"`` (:data:`actorq.actors.base.COLLECTIONS`;
            ``actors.collection=auto`` is resolved by ``train()`` from the learner's family).
            Either backend hands a lock-step round over as one batch ``[envs, T]``.
        writer: the shared replay's writer, for worker processes that store their batches
            themselves; Ray actors may run on other machines, so with them the learner stores
            every batch.
        kwargs: the :class:`~actorq.actors.base.ActorSpec` fields (the ``actors`` keys every
            backend shares, and what the experience pipeline adds: env, seed, frames done).
    """
    from actorq.actors.base import ActorSpec

    spec = ActorSpec(**kwargs, collection=collection)
    if backend == "ray":
        from actorq.actors.ray_pool import RayActorPool

        return RayActorPool(spec, policy, **dict(ray or {}))
    from actorq.actors.pool import ActorPool

    return ActorPool(spec, policy, writer=writer)
