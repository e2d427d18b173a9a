"""The ``ray`` backend: Flotilla runs as Ray jobs, through a Ray head's Jobs API."""

from __future__ import annotations

from typing import Any

from flotilla.backends.ray.backend import RayBackend


def make_ray_backend(**settings: Any) -> RayBackend:
    """The entry-point factory: ``factory(cluster=NAME, address=URL, token=…, …)``.

    A setting the backend does not take raises ``TypeError`` naming it.
    """
    return RayBackend(**settings)


__all__ = ["RayBackend", "make_ray_backend"]
