"""Backends: the boundary through which Flotilla hands a scheduled run to a cluster's engine.

``interface`` holds the contract (``Backend``) and its request/result types. Backends register
under the entry-point group ``flotilla.backends`` (built-ins ``local`` and ``sim`` too), and
``load_backend`` makes one from its name and configuration.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from flotilla.backends.interface import (
    Backend,
    BackendClosed,
    BackendError,
    BackendRunState,
    BackendUnavailable,
    CancelOutcome,
    CancelRequest,
    CancelResult,
    DispatchRejected,
    DispatchRequest,
    DispatchResult,
    Inventory,
    LogChunk,
    LogsRequest,
    LogStream,
    ReplicaPlacement,
    ReplicaStatus,
    RunBusy,
    RunStatus,
    StatusRequest,
    UnknownReplica,
    UnknownRun,
)

BACKEND_GROUP = "flotilla.backends"


class UnknownBackend(LookupError):
    """A backend name that no installed package registers."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name, self.known = name, sorted(known)
        super().__init__(
            f"unknown backend {name!r} (known: {', '.join(self.known) or 'none'}; "
            f"backends register under the entry-point group {BACKEND_GROUP!r})"
        )


def available_backends() -> list[str]:
    return sorted({point.name for point in entry_points(group=BACKEND_GROUP)})


def backend_factory(name: str) -> Callable[..., Backend]:
    """The factory registered as ``name`` (raises ``UnknownBackend`` naming the known ones)."""
    points = {point.name: point for point in entry_points(group=BACKEND_GROUP)}
    if name not in points:
        raise UnknownBackend(name, list(points))
    factory: Callable[..., Backend] = points[name].load()
    return factory


@functools.cache
def backend_shares_gpus(name: str) -> bool:
    """Whether the backend registered as ``name`` can run a share of a GPU device (``gpu:
    0.5``), known without making one: a factory class (or a function annotated to return
    one) whose ``shares_gpu_devices`` is false cannot (Kubernetes hands out whole
    ``nvidia.com/gpu`` devices). An unknown or unimportable backend is taken to share."""
    try:
        factory: Any = backend_factory(name)
    except (UnknownBackend, ImportError):
        return True
    made = factory
    if not isinstance(factory, type):
        try:
            made = typing.get_type_hints(factory).get("return")
        except (NameError, TypeError):
            return True
    return bool(getattr(made, "shares_gpu_devices", True))


def backend_can_grow(name: str) -> bool:
    """Whether the backend registered as ``name`` can add replicas to a running run
    (``ReplicaGrowth``), known without making one: its factory is the class, or a function
    whose return annotation is. An unknown name, a package that cannot be imported here, or a
    factory that does not say, cannot."""
    try:
        factory: Any = backend_factory(name)
    except (UnknownBackend, ImportError):
        return False
    made = factory
    if not isinstance(factory, type):
        try:
            made = typing.get_type_hints(factory).get("return")
        except (NameError, TypeError):
            return False
    return isinstance(made, type) and callable(getattr(made, "add_replicas", None))


def load_backend(name: str, **config: Any) -> Backend:
    """A new backend object of the registered ``name``, configured by keyword.

    A configuration key the backend does not take raises ``TypeError`` naming it.
    """
    return backend_factory(name)(**config)


__all__ = [
    "BACKEND_GROUP",
    "Backend",
    "BackendClosed",
    "BackendError",
    "BackendRunState",
    "BackendUnavailable",
    "CancelOutcome",
    "CancelRequest",
    "CancelResult",
    "DispatchRejected",
    "DispatchRequest",
    "DispatchResult",
    "Inventory",
    "LogChunk",
    "LogStream",
    "LogsRequest",
    "ReplicaPlacement",
    "ReplicaStatus",
    "RunBusy",
    "RunStatus",
    "StatusRequest",
    "UnknownBackend",
    "UnknownReplica",
    "UnknownRun",
    "available_backends",
    "backend_can_grow",
    "backend_factory",
    "backend_shares_gpus",
    "load_backend",
]
