"""What the sync and async clients share: each request as a ``Call`` (method, path, query,
body, and how to read the answer), and the state of the operations that take several
requests (paging, following logs, waiting, reading an event stream). The clients only send
calls and sleep, each in its own way.

The specs' models (``flotilla.model.queue``) are imported by the calls that read them, so a
client that lists jobs does not build them (docs/performance.md, CLI start-up).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, TypeAdapter

from flotilla.api.schemas import (
    ArrayDetail,
    CancelResult,
    Cluster,
    EngineIds,
    Event,
    Job,
    JobDetail,
    JobList,
    LogChunk,
    Node,
    Report,
    RunUseReport,
    SubmitResult,
    Why,
)
from flotilla.lifecycle.states import TERMINAL_STATE_NAMES
from flotilla.sdk.errors import error_for

if TYPE_CHECKING:
    from flotilla.model.queue import QueueSpec, QuotaSpec

T = TypeVar("T")
ModelT = TypeVar("ModelT", bound=BaseModel)

TERMINAL = TERMINAL_STATE_NAMES
"""A job in one of these states has ended (the lifecycle core's set)."""
STREAMS = ("stdout", "stderr")


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer."""

    method: str
    path: str
    read: Callable[[Any], T]
    params: Mapping[str, Any] = field(default_factory=dict)
    body: Any = None


def one(kind: type[ModelT]) -> Callable[[Any], ModelT]:
    return kind.model_validate


def many(kind: type[ModelT]) -> Callable[[Any], list[ModelT]]:
    adapter = TypeAdapter(list[kind])  # type: ignore[valid-type]

    def read(data: Any) -> list[ModelT]:
        found: list[ModelT] = adapter.validate_python(data)
        return found

    return read


def nothing(_data: Any) -> None:
    return None


def check(status: int, reason: str, content: bytes) -> None:
    """Raise the error an answer stands for (``flotilla.sdk.errors``)."""
    if status < 400:
        return
    try:
        body = json.loads(content)
        message = str(body.get("message", reason))
        problems = [str(line) for line in body.get("problems", [])]
    except (ValueError, AttributeError):
        message, problems = f"{status} {reason}", []
    raise error_for(status, message, problems)


def answer(call: Call[T], status: int, reason: str, content: bytes) -> T:
    check(status, reason, content)
    return call.read(json.loads(content) if content and status != 204 else None)


def job_path(job: str) -> str:
    """``/v1/jobs/REF`` for an id, id prefix or name (``QUEUE/NAME`` is resolved first)."""
    return f"/v1/jobs/{quote(job, safe='')}"


def get_job(job: str) -> Call[JobDetail]:
    queue, slash, name = job.partition("/")
    if slash:
        path = f"/v1/queues/{quote(queue, safe='')}/jobs/{quote(name, safe='')}"
        return Call("GET", path, one(JobDetail))
    return Call("GET", job_path(job), one(JobDetail))


def submit(body: dict[str, Any]) -> Call[SubmitResult]:
    return Call("POST", "/v1/jobs", one(SubmitResult), body=body)


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a listing shows (every given filter must match)."""

    queue: str | None = None
    states: Sequence[str] = ()
    owner: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    name: str | None = None
    newest_first: bool = False

    def params(self) -> dict[str, Any]:
        given: dict[str, Any] = {
            "queue": self.queue,
            "state": list(self.states) or None,
            "owner": self.owner,
            "label": [f"{key}={value}" for key, value in self.labels.items()] or None,
            "name": self.name,
            "order": "newest" if self.newest_first else None,
        }
        return {key: value for key, value in given.items() if value is not None}


def list_page(
    where: JobFilter,
    after: int | None = None,
    limit: int = 100,
    total: bool = False,
    starts: bool = False,
) -> Call[JobList]:
    params = where.params() | {"limit": limit}
    if after is not None:
        params["after"] = after
    if total:
        params["total"] = "true"
    if starts:
        params["starts"] = "true"
    return Call("GET", "/v1/jobs", one(JobList), params=params)


def cancel(job: str, reason: str) -> Call[Job]:
    return Call("POST", f"{job_path(job)}/cancel", one(Job), body={"reason": reason})


def array(array_id: str) -> Call[ArrayDetail]:
    return Call("GET", f"/v1/arrays/{quote(array_id, safe='')}", one(ArrayDetail))


def cancel_array(array_id: str, reason: str) -> Call[CancelResult]:
    path = f"/v1/arrays/{quote(array_id, safe='')}/cancel"
    return Call("POST", path, one(CancelResult), body={"reason": reason})


def cancel_matching(
    queue: str | None, labels: Mapping[str, str], reason: str
) -> Call[CancelResult]:
    body = {"queue": queue, "labels": dict(labels), "reason": reason}
    return Call("POST", "/v1/jobs/cancel", one(CancelResult), body=body)


def reprioritize(job: str, priority: int, reason: str) -> Call[Job]:
    body = {"priority": priority, "reason": reason}
    return Call("POST", f"{job_path(job)}/priority", one(Job), body=body)


def hold(job: str, reason: str) -> Call[Job]:
    return Call("POST", f"{job_path(job)}/hold", one(Job), body={"reason": reason})


def requeue(job: str, reason: str) -> Call[Job]:
    return Call("POST", f"{job_path(job)}/requeue", one(Job), body={"reason": reason})


def release(job: str, reason: str) -> Call[Job]:
    return Call("POST", f"{job_path(job)}/release", one(Job), body={"reason": reason})


def engine_ids(job: str) -> Call[EngineIds]:
    return Call("GET", f"{job_path(job)}/engine-ids", one(EngineIds))


def events(job: str) -> Call[list[Event]]:
    return Call("GET", f"{job_path(job)}/events", many(Event))


def why(job: str) -> Call[Why]:
    return Call("GET", f"{job_path(job)}/why", one(Why))


def logs(job: str, stream: str, offset: int, selection: LogSelection) -> Call[LogChunk]:
    params: dict[str, Any] = {"stream": stream, "offset": offset}
    if selection.attempt is not None:
        params["attempt"] = selection.attempt
    if selection.task is not None:
        params["task"] = selection.task
    if selection.replica is not None:
        params["replica"] = selection.replica
    return Call("GET", f"{job_path(job)}/logs", one(LogChunk), params=params)


def queues() -> Call[list[QueueSpec]]:
    from flotilla.model.queue import QueueSpec

    return Call("GET", "/v1/queues", many(QueueSpec))


def put_queue(spec: QueueSpec) -> Call[QueueSpec]:
    from flotilla.model.queue import QueueSpec

    body = spec.model_dump(mode="json", exclude_none=True)
    return Call("PUT", f"/v1/queues/{quote(spec.name, safe='')}", one(QueueSpec), body=body)


def delete_queue(name: str) -> Call[None]:
    return Call("DELETE", f"/v1/queues/{quote(name, safe='')}", nothing)


def quotas() -> Call[list[QuotaSpec]]:
    from flotilla.model.queue import QuotaSpec

    return Call("GET", "/v1/quotas", many(QuotaSpec))


def put_quota(spec: QuotaSpec, parent: str | None) -> Call[QuotaSpec]:
    from flotilla.model.queue import QuotaSpec

    body = spec.model_dump(mode="json", exclude_none=True)
    params = {} if parent is None else {"parent": parent}
    path = f"/v1/quotas/{quote(spec.name, safe='')}"
    return Call("PUT", path, one(QuotaSpec), params=params, body=body)


def delete_quota(name: str) -> Call[None]:
    return Call("DELETE", f"/v1/quotas/{quote(name, safe='')}", nothing)


def clusters() -> Call[list[Cluster]]:
    return Call("GET", "/v1/clusters", many(Cluster))


def nodes(cluster: str) -> Call[list[Node]]:
    return Call("GET", f"/v1/clusters/{quote(cluster, safe='')}/nodes", many(Node))


def report() -> Call[Report]:
    return Call("GET", "/v1/scheduling/report", one(Report))


def fleet_usage() -> Call[dict[str, Any]]:
    """What the fleet uses now (the dashboard's view): clusters, queues, and quotas with
    their usage, borrowing and lending."""

    return Call("GET", "/ui/api/fleet", _mapping)


def usage(since: str, until: str | None, by: str) -> Call[dict[str, Any]]:
    """Accounting: CPU-, memory- and GPU-hours that runs held over a range (``/v1/usage``)."""
    params = {"since": since, "by": by} | ({} if until is None else {"until": until})
    return Call("GET", "/v1/usage", _mapping, params=params)


def runs(
    since: str,
    queues: Sequence[str] = (),
    owner: str | None = None,
    states: Sequence[str] = (),
    limit: int | None = None,
) -> Call[RunUseReport]:
    """The per-run report (``/v1/runs``, ``flotilla sacct``): each run active at or after
    ``since`` with its exit code, nodes, elapsed, CPU time, peak memory and GPU use."""
    given: dict[str, Any] = {
        "since": since,
        "queue": list(queues) or None,
        "owner": owner,
        "state": list(states) or None,
        "limit": limit,
    }
    params = {key: value for key, value in given.items() if value is not None}
    return Call("GET", "/v1/runs", one(RunUseReport), params=params)


def fleet() -> Call[dict[str, Any]]:
    """The fleet in force: ``{"fleet": document, "version", "applied_at"}`` (admin)."""
    return Call("GET", "/v1/fleet", _mapping)


def export_scenario(runtimes: str = "auto") -> Call[dict[str, Any]]:
    """The live fleet and its workload as a scenario (admin), each job's runtime estimated
    by ``runtimes`` (auto, max_runtime or history)."""
    return Call("GET", "/v1/fleet/scenario", _mapping, params={"runtimes": runtimes})


def apply_fleet(document: Mapping[str, Any], expected_version: int | None) -> Call[dict[str, Any]]:
    params = {} if expected_version is None else {"expected_version": expected_version}
    return Call("PUT", "/v1/fleet", _mapping, params=params, body=dict(document))


def _mapping(data: Any) -> dict[str, Any]:
    return dict(data)


@dataclass(frozen=True)
class LogSelection:
    """Which run and process to read: ``attempt`` (default: the latest run), ``task``
    (default: the first), ``replica`` (default: 0)."""

    attempt: int | None = None
    task: str | None = None
    replica: int | None = None


@dataclass(frozen=True)
class LogOutput:
    """A piece of a run's output, as it was read."""

    stream: str
    text: str
    run_id: str


class LogReader:
    """Reads a job's streams from offset 0, chunk by chunk. Without ``follow`` each stream is
    read to its current end; with it, until the run has ended and everything was read."""

    def __init__(
        self, job_id: str, streams: Iterable[str], selection: LogSelection, follow: bool
    ) -> None:
        self.job_id = job_id
        self.selection = selection
        self.follow = follow
        self.offsets = {stream: 0 for stream in streams}
        self.done: set[str] = set()
        self.progressed = False

    def calls(self) -> list[tuple[str, Call[LogChunk]]]:
        """This round's reads, one per stream not yet done."""
        self.progressed = False
        return [
            (stream, logs(self.job_id, stream, offset, self.selection))
            for stream, offset in self.offsets.items()
            if stream not in self.done
        ]

    def take(self, stream: str, chunk: LogChunk) -> LogOutput | None:
        self.offsets[stream] = chunk.next_offset
        if chunk.complete or (not self.follow and not chunk.data):
            self.done.add(stream)
        if not chunk.data:
            return None
        self.progressed = True
        return LogOutput(stream, chunk.data, chunk.run_id)

    @property
    def finished(self) -> bool:
        return len(self.done) == len(self.offsets)

    @property
    def pause(self) -> bool:
        """Nothing new this round: wait a little before asking again."""
        return not self.progressed


@dataclass
class Waiting:
    """Where each awaited job stands; ``pending`` are the ones to ask about again."""

    states: dict[str, str] = field(default_factory=dict)
    details: dict[str, JobDetail] = field(default_factory=dict)

    def take(self, reference: str, job: JobDetail) -> None:
        self.states[reference] = job.state
        self.details[reference] = job

    def pending(self, references: Sequence[str]) -> list[str]:
        return [ref for ref in references if self.states.get(ref) not in TERMINAL]

    def timeout_message(self, references: Sequence[str], timeout: float) -> str:
        waiting = ", ".join(
            f"{ref} ({self.states.get(ref, '?')})" for ref in self.pending(references)
        )
        return f"timed out after {timeout:g}s waiting for {waiting}"


class EventStreamParser:
    """Server-sent events, line by line: returns each complete ``job-event`` as an ``Event``;
    ``ended`` once the server said ``end``."""

    def __init__(self) -> None:
        self.kind = ""
        self.data: list[str] = []
        self.ended = False

    def feed(self, line: str) -> Event | None:
        if line.startswith("event:"):
            self.kind = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            self.data.append(line.removeprefix("data:").strip())
        elif not line.strip():
            kind, data = self.kind, "\n".join(self.data)
            self.kind, self.data = "", []
            if kind == "end":
                self.ended = True
            elif kind == "job-event" and data:
                return Event.model_validate_json(data)
        return None
