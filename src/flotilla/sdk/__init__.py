"""The Python SDK: ``Client`` and ``AsyncClient`` over the REST API (``docs/sdk.md``).

Results are the server's own response models (``flotilla.api.schemas``) and the model's
specs (``QueueSpec``, ``QuotaSpec``), so a field the API adds is there on both sides.

Its names are imported on first use (PEP 562): ``flotilla.sdk.connection`` is there
without the HTTP client, and ``Client`` without ``AsyncClient``.
"""

from typing import TYPE_CHECKING

from flotilla.model.exports import lazy_exports

# Imported now, not on first use: the function shares its name with its module, which an
# import of ``flotilla.sdk.checkpoint`` would otherwise leave here in its place.
from flotilla.sdk.checkpoint import checkpoint

if TYPE_CHECKING:
    from flotilla.api.schemas import (
        Cluster,
        Event,
        Job,
        JobDetail,
        JobList,
        LogChunk,
        Node,
        Run,
        SubmitResult,
        Why,
    )
    from flotilla.sdk.aio import AsyncClient
    from flotilla.sdk.calls import JobFilter, LogOutput, LogSelection
    from flotilla.sdk.client import Client
    from flotilla.sdk.errors import (
        BadRequest,
        Conflict,
        FlotillaError,
        Forbidden,
        InvalidSpec,
        NotFound,
        ServerError,
        TooMany,
        Unauthorized,
        Unreachable,
        WaitTimeout,
    )
    from flotilla.sdk.jobfile import read_job_file

__all__ = [
    "AsyncClient",
    "BadRequest",
    "Client",
    "Cluster",
    "Conflict",
    "Event",
    "FlotillaError",
    "Forbidden",
    "InvalidSpec",
    "Job",
    "JobDetail",
    "JobFilter",
    "JobList",
    "LogChunk",
    "LogOutput",
    "LogSelection",
    "Node",
    "NotFound",
    "Run",
    "ServerError",
    "SubmitResult",
    "TooMany",
    "Unauthorized",
    "Unreachable",
    "WaitTimeout",
    "Why",
    "checkpoint",
    "read_job_file",
]

_MODULES: dict[str, list[str]] = {
    "flotilla.sdk.aio": ["AsyncClient"],
    "flotilla.sdk.calls": ["JobFilter", "LogOutput", "LogSelection"],
    "flotilla.sdk.client": ["Client"],
    "flotilla.sdk.errors": [
        "BadRequest",
        "Conflict",
        "FlotillaError",
        "Forbidden",
        "InvalidSpec",
        "NotFound",
        "ServerError",
        "TooMany",
        "Unauthorized",
        "Unreachable",
        "WaitTimeout",
    ],
    "flotilla.sdk.jobfile": ["read_job_file"],
    "flotilla.api.schemas": [
        "Cluster",
        "Event",
        "Job",
        "JobDetail",
        "JobList",
        "LogChunk",
        "Node",
        "Run",
        "SubmitResult",
        "Why",
    ],
}
"""Where each exported name is defined."""
__getattr__ = lazy_exports(__name__, _MODULES)
