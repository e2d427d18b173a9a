"""The Python SDK: ``Client`` and ``AsyncClient`` over the REST API (``docs/sdk.md``).

Results are the server's own response models (``flotilla.api.schemas``) and the model's
specs (``QueueSpec``, ``QuotaSpec``), so a field the API adds is there on both sides.
"""

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
from flotilla.sdk.checkpoint import checkpoint
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
