"""Actors: the pool of workers that run the actors' policy in their envs, on this machine
(``actors.backend=process``) or on a Ray cluster (``actors.backend=ray``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def actor_pool(backend: str = "process", ray: Mapping[str, Any] | None = None, **kwargs: Any):
    """The actor pool ``actors.backend`` names, built from the ``actors`` config group.

    Args:
        backend: ``"process"``: :class:`~actorq.actors.pool.ActorPool`, worker processes on
            this machine; ``"ray"``: :class:`~actorq.actors.ray_pool.RayActorPool`, Ray actors.
        ray: ``address``, ``num_cpus`` and ``resources`` for the Ray backend (``actors.ray``).
        kwargs: the pool's own arguments.
    """
    if backend == "process":
        from actorq.actors.pool import ActorPool

        return ActorPool(**kwargs)
    if backend == "ray":
        from actorq.actors.ray_pool import RayActorPool

        return RayActorPool(**kwargs, **dict(ray or {}))
    raise ValueError(f"actors.backend must be process or ray, got {backend!r}")
