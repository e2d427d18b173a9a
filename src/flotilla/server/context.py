"""What every route needs: the store, the scheduler handle (if any), auth and the caller.

Routes take these as FastAPI dependencies, so the app factory is the only place that wires
them and tests can build an app over any store and a fake handle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry, Counter, Histogram

from flotilla.scheduler.precedence import Precedence
from flotilla.secrets import SecretBox
from flotilla.server.auth import AuthSettings, Permission, User
from flotilla.server.errors import ApiError
from flotilla.server.guard import ServerLimits
from flotilla.service.handle import SchedulerHandle
from flotilla.store import (
    AmbiguousJobError,
    CommittedChanges,
    JobRecord,
    NotFoundError,
    Store,
    job_not_found,
)

_SECONDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


@dataclass
class ApiMetrics:
    """The server's own metrics, in its own registry (one per app, so tests never clash),
    and the job counters: the app observes its store's commits (``CommitObserver``), so every
    submission and state change this process writes is counted, the API's own cancels as
    much as the scheduler's transitions."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.requests = Counter(
            "flotilla_api_requests_total",
            "API requests by method, route template and status code.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "flotilla_api_request_seconds",
            "API request duration by method and route template.",
            ["method", "route"],
            buckets=_SECONDS,
            registry=self.registry,
        )
        self.submitted = Counter(
            "flotilla_jobs_submitted_total",
            "Jobs submitted, per queue.",
            ["queue"],
            registry=self.registry,
        )
        self.transitions = Counter(
            "flotilla_job_transitions_total",
            "Job state changes committed by this process, per from and to state.",
            ["from_state", "state"],
            registry=self.registry,
        )

    def committed(self, changes: CommittedChanges) -> None:
        for queue, count in changes.submitted.items():
            self.submitted.labels(queue=queue).inc(count)
        for (old, new), count in changes.transitions.items():
            self.transitions.labels(from_state=old, state=new).inc(count)


@dataclass
class ServerContext:
    store: Store
    scheduler: SchedulerHandle | None
    auth: AuthSettings
    poll_interval: float = 0.2
    """How often an event stream polls the store for changes."""
    metrics: ApiMetrics = field(default_factory=ApiMetrics)
    limits: ServerLimits = field(default_factory=ServerLimits)
    secrets: SecretBox | None = None
    """Seals secret env values at submission; None: such a job is refused."""
    precedence: Precedence = field(default_factory=Precedence)
    """Requests before scheduling, and reads before bulk submissions (the scheduler's, when
    it runs in this process: ``scheduler/precedence.py``)."""
    streams: dict[str, int] = field(default_factory=dict)
    """Open event streams by client address (see ``open_stream``)."""

    def open_stream(self, client: str) -> None:
        """Count one more open event stream of ``client``; 429/503 past the limits."""
        if self.streams.get(client, 0) >= self.limits.event_streams_per_client:
            raise ApiError(
                429,
                f"too many open event streams from {client}: the limit is "
                f"{self.limits.event_streams_per_client}; close one first",
            )
        if sum(self.streams.values()) >= self.limits.event_streams_total:
            raise ApiError(503, "too many open event streams on this server; retry later")
        self.streams[client] = self.streams.get(client, 0) + 1

    def close_stream(self, client: str) -> None:
        left = self.streams.get(client, 0) - 1
        if left > 0:
            self.streams[client] = left
        else:
            self.streams.pop(client, None)

    def wake(self) -> None:
        """Tell a local scheduler that there is new work (or less of it)."""
        if self.scheduler is not None:
            self.scheduler.wake()

    def cancelled(self, jobs: Sequence[JobRecord]) -> None:
        """Tell a local scheduler which jobs' cancels were just committed: it stops their
        runs at once, before its next read of the change feed (issue 14)."""
        if self.scheduler is not None:
            self.scheduler.cancelled(jobs)


def get_context(request: Request) -> ServerContext:
    context: ServerContext = request.app.state.flotilla
    return context


_bearer = HTTPBearer(auto_error=False, description="A token from the server's token config.")


def current_user(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> User:
    """The caller; 401 without a token or with one nobody has."""
    context = get_context(request)
    header = request.headers.get("authorization")
    user = context.auth.authenticate(header)
    if user is None:
        message = "a bearer token is required" if not header else "the bearer token is not valid"
        raise ApiError(401, message, headers={"WWW-Authenticate": "Bearer"})
    return user


Context = Annotated[ServerContext, Depends(get_context)]
Caller = Annotated[User, Depends(current_user)]


def require(user: User, permission: Permission, queue: str) -> None:
    if not user.can(permission, queue):
        raise ApiError(
            403, f"user {user.name!r} lacks the {permission.value!r} permission on queue {queue!r}"
        )


def require_read(user: User, job: JobRecord) -> None:
    """One's own jobs, or any with ``read`` (or ``cancel``, ``admin``) on the job's queue;
    another's job is answered as if it did not exist (404), as ``find_job`` does."""
    if not user.may_read(job.queue, job.owner or ""):
        raise ApiError(404, str(job_not_found(job.id)))


def find_job(context: ServerContext, user: User, reference: str) -> JobRecord:
    """The job a path's reference names (an id, an id prefix, a name: ``Store.find_job``);
    the caller checks what the user may do with it. Jobs the caller may not read do not
    exist for it: such a job is a 404 worded as for a reference that names nothing (a 403
    would tell a tenant that another queue's job exists), and a reference that fits several
    jobs is resolved among the ones the caller may read — one: that job; none: 404; several:
    a 409 listing them."""
    try:
        job = context.store.find_job(reference)
    except AmbiguousJobError as error:
        visible = _readable_candidates(context, user, error.candidates)
        if len(visible) == 1:
            return visible[0][1]
        if not visible:
            raise ApiError(404, str(job_not_found(reference))) from None
        shown = [candidate for candidate, _ in visible]
        raise ApiError(409, str(AmbiguousJobError(reference, shown)), shown) from None
    if not user.may_read(job.queue, job.owner or ""):
        raise ApiError(404, str(job_not_found(reference)))
    return job


def _readable_candidates(
    context: ServerContext, user: User, candidates: Sequence[str]
) -> list[tuple[str, JobRecord]]:
    """The candidates (``QUEUE/NAME (ID)``) the caller may read, with their jobs."""
    found: list[tuple[str, JobRecord]] = []
    for candidate in candidates:
        job_id = candidate.rpartition(" (")[2].removesuffix(")")
        try:
            record = context.store.get_job(job_id)
        except NotFoundError:
            continue
        if user.may_read(record.queue, record.owner or ""):
            found.append((candidate, record))
    return found


def require_admin(user: User, action: str) -> None:
    if not user.admin:
        raise ApiError(403, f"user {user.name!r} needs the admin role to {action}")
