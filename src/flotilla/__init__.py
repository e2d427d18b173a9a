"""Flotilla: a batch job scheduler for ML and HPC platforms.

``flotilla.Client`` and ``flotilla.AsyncClient`` (and the SDK's errors) are imported on
first use, so the engine and the simulator do not load the HTTP client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from flotilla.sdk import (
        AsyncClient,
        BadRequest,
        Client,
        Conflict,
        FlotillaError,
        Forbidden,
        InvalidSpec,
        JobFilter,
        LogSelection,
        NotFound,
        ServerError,
        TooMany,
        Unauthorized,
        Unreachable,
        WaitTimeout,
        checkpoint,
    )

__all__ = [
    "AsyncClient",
    "BadRequest",
    "Client",
    "Conflict",
    "FlotillaError",
    "Forbidden",
    "InvalidSpec",
    "JobFilter",
    "LogSelection",
    "NotFound",
    "ServerError",
    "TooMany",
    "Unauthorized",
    "Unreachable",
    "WaitTimeout",
    "__version__",
    "checkpoint",
]

SDK_NAMES = frozenset(__all__) - {"__version__"}


def __getattr__(name: str) -> Any:
    """The SDK's names, imported when first asked for (PEP 562)."""
    if name in SDK_NAMES:
        return getattr(importlib.import_module("flotilla.sdk"), name)
    raise AttributeError(f"module 'flotilla' has no attribute {name!r}")
