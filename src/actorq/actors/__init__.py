"""Actors: the pool of workers that run the actors' policy in their envs, on this machine
(``actors.backend=process``) or on a Ray cluster (``actors.backend=ray``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def actor_pool(backend: str = "process", ray: Mapping[str, Any] | None = None, sync: bool = False, **kwargs: Any):
    """The actor pool ``actors.backend`` names, built from the ``actors`` config group.

    Args:
        backend: ``"process"``: :class:`~actorq.actors.pool.ActorPool`, worker processes on
            this machine; ``"ray"``: :class:`~actorq.actors.ray_pool.RayActorPool`, Ray actors.
        ray: ``address``, ``num_cpus``, ``resources`` and ``requests_in_flight`` for the Ray
            backend (``actors.ray``).
        sync: lock-step collection (Ray backend only): every actor's batch each round.
        kwargs: the pool's own arguments.
    """
    if not isinstance(sync, bool):
        raise ValueError(f"actors.sync must be true or false, got {sync!r}")
    if backend == "process":
        from actorq.actors.pool import ActorPool

        if sync:
            raise ValueError("actors.sync=true needs actors.backend=ray; local actor processes collect asynchronously")
        return ActorPool(**kwargs)
    if backend == "ray":
        from actorq.actors.ray_pool import RayActorPool

        return RayActorPool(**kwargs, **dict(ray or {}), sync=sync)
    raise ValueError(f"actors.backend must be process or ray, got {backend!r}")
