"""Request and response bodies of the REST API (they make the OpenAPI schema).

The server builds responses from store records with the ``from_record`` helpers, so the wire
format stays stable if a record grows a field the API does not want to expose. The records
are imported for typing only: the SDK and the CLI read these models without the store.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from flotilla.model.gpu_use import GpuUse
    from flotilla.store import (
        ClusterRecord,
        DependencyRecord,
        EventRecord,
        JobRecord,
        NodeRecord,
        RunRecord,
        RunReportRow,
    )


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunGpu(BaseModel):
    """A run's GPU use as its backend measured it (``model/gpu_use.py``)."""

    memory_used: int = Field(description="Bytes of GPU memory its processes hold now.")
    memory_peak: int = Field(description="The most GPU memory they held at any sample.")
    utilization: float | None = Field(
        description="Percent of the GPUs it holds kept busy, at the last sample."
    )
    gpu_hours_held: float
    gpu_hours_used: float = Field(description="GPU-hours its processes kept the GPUs busy.")
    efficiency: float | None = Field(description="Used over held (like seff's CPU efficiency).")
    samples: int

    @classmethod
    def of(cls, use: GpuUse | None) -> RunGpu | None:
        if use is None:
            return None
        return cls(
            memory_used=use.memory_used,
            memory_peak=use.memory_peak,
            utilization=use.utilization,
            gpu_hours_held=use.held_gpu_seconds / 3600,
            gpu_hours_used=use.used_gpu_seconds / 3600,
            efficiency=use.efficiency,
            samples=use.samples,
        )


class Run(BaseModel):
    id: str
    attempt: int
    cluster: str
    assignment: dict[str, Any]
    state: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    exit_code: int | None
    message: str | None
    gpu: RunGpu | None = None
    last_checkpoint_at: datetime | None = None
    """When the run last reported a checkpoint (``flotilla.checkpoint()``); null: never."""
    cpu_seconds: float | None = Field(
        None,
        description="CPU seconds its processes used (all replicas), measured when it ended; "
        "null: not measured.",
    )
    memory_peak: int | None = Field(
        None,
        description="The most memory (bytes) one of its replicas held, measured when it "
        "ended; null: not measured.",
    )

    @classmethod
    def from_record(cls, run: RunRecord) -> Run:
        use = run.gpu
        return cls(
            id=run.id,
            attempt=run.attempt,
            cluster=run.cluster,
            assignment=dict(run.assignment),
            state=run.state.value,
            created_at=run.created_at,
            started_at=run.started_at,
            finished_at=run.finished_at,
            exit_code=run.exit_code,
            message=run.message,
            gpu=RunGpu.of(use),
            last_checkpoint_at=run.last_checkpoint_at,
            cpu_seconds=run.cpu_seconds,
            memory_peak=run.memory_peak,
        )


class Job(BaseModel):
    """A job as listed: its state, why it is in it, and its latest run."""

    id: str
    name: str
    queue: str
    state: str
    priority: int
    owner: str | None
    labels: dict[str, str]
    submitted_at: datetime
    updated_at: datetime
    cancel_requested: bool
    reason: str
    run: Run | None
    cursor: int = Field(description="Submission serial: pass as `after` to list later jobs.")
    pending_reason: str | None = Field(
        default=None,
        description="Why a waiting job waits: from the scheduler's latest run when one is "
        "attached to this server, else the reason stored with the job; null otherwise.",
    )
    not_before: datetime | None = Field(
        default=None, description="A queued job waiting out its retry backoff: not before this."
    )
    array_id: str | None = Field(default=None, description="The array this job is an element of.")
    array_index: int | None = None
    max_runtime: float | None = Field(
        default=None,
        description="The job's time limit in seconds (its `max_runtime`); null: none.",
    )
    estimated_start: StartEstimate | None = Field(
        default=None,
        description="A waiting job's expected start from the service's projection, when one "
        "runs in this process and has seen the job (in a listing: with `starts=true`).",
    )
    start_unknown: str | None = Field(
        default=None,
        description="Why a waiting or held job has no `estimated_start`, in words "
        "(`unknown: held, …`, `unknown: not projected yet (…)`); null when it has one or "
        "does not wait (in a listing: with `starts=true`).",
    )

    @classmethod
    def from_record(cls, job: JobRecord, pending_reason: str | None = None) -> Job:
        return cls(**_job_fields(job), pending_reason=pending_reason)


def _job_fields(job: JobRecord) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "queue": job.queue,
        "state": job.state.value,
        "priority": job.priority,
        "owner": job.owner,
        "labels": dict(job.labels),
        "submitted_at": job.submitted_at,
        "updated_at": job.updated_at,
        "cancel_requested": job.cancel_requested,
        "reason": job.reason,
        "run": None if job.run is None else Run.from_record(job.run),
        "cursor": job.submit_serial,
        "not_before": job.not_before,
        "array_id": job.array_id,
        "array_index": job.array_index,
        "max_runtime": job.spec.max_runtime,
    }


def _shown_spec(job: JobRecord) -> dict[str, Any]:
    """The spec as stored, secret env values hidden (``flotilla.secrets``: imported here, by
    the server, so that a client reading these models does not load the cipher)."""
    from flotilla.secrets import redact

    spec = job.spec.model_dump(mode="json", exclude_none=True)
    if "payload" in spec:
        spec["payload"] = redact(spec["payload"])
    return spec


class Dependency(BaseModel):
    """One ``depends_on`` entry as resolved at submission."""

    job_id: str
    job: str = Field(description="The job as the submitter named it.")
    condition: str
    state: str | None = Field(
        default=None, description="The dependency's state now (in `why` answers)."
    )

    @classmethod
    def from_record(cls, dependency: DependencyRecord, state: str | None = None) -> Dependency:
        return cls(
            job_id=dependency.job_id,
            job=dependency.job,
            condition=dependency.condition.value,
            state=state,
        )


class GangMembers(BaseModel):
    """A non-strict gang's replicas: how many its run holds, how many it asks for, and why
    the rest wait while it grows."""

    placed: int
    wanted: int
    waiting: str | None = Field(
        default=None, description="Why the replicas not placed yet wait (null: none waits)."
    )


class StartEstimate(BaseModel):
    """When a waiting job is expected to start: the service's latest projection of the live
    fleet forward (docs/scenarios.md, *What-if from the live fleet*)."""

    start: datetime | None = Field(
        description="The expected start; null when not within the projection's horizon."
    )
    projected_at: datetime = Field(description="When the projection's export was taken.")
    horizon_seconds: float
    method: str = Field(description="The runtime estimator: auto, max_runtime or history.")
    basis: str = Field(description="The runtimes the projection assumed, in words.")
    runtime_seconds: float | None = Field(description="This job's own expected runtime.")
    runtime_source: str = Field(description="max_runtime, history or none.")
    runtime_basis: str
    others: dict[str, datetime | None] = Field(
        default={}, description="The start projected with each other estimator, by name."
    )
    summary: str = Field(
        description="In words: `expected to start in about 40 min (projection of 12:03 UTC; "
        "runtimes from history)`."
    )


class JobDetail(Job):
    """One job in full: spec as stored, every run, and why it waits if it does."""

    spec: dict[str, Any]
    runs: list[Run]
    pending_reason: str | None = Field(
        description="Why a waiting job waits: from the scheduler's latest run when one is "
        "attached to this server, else the reason stored with the job."
    )
    dependencies: list[Dependency] = Field(
        default=[], description="The jobs it depends on (`depends_on`), by id."
    )
    last_failure: str | None = Field(
        default=None,
        description="The latest failed attempt: its number and what ended it (kept while a "
        "retry runs and after the job failed for good).",
    )
    members: GangMembers | None = Field(
        default=None,
        description="A non-strict gang that runs (it may start with `min_member` replicas and "
        "grow): replicas placed and wanted, and why the rest wait.",
    )

    @classmethod
    def build(
        cls,
        job: JobRecord,
        runs: list[RunRecord],
        pending: str | None,
        members: GangMembers | None = None,
    ) -> JobDetail:
        failed = [run for run in runs if run.state.value == "failed"]
        last = None
        if failed:
            run = failed[-1]
            what = run.message or (f"exited {run.exit_code}" if run.exit_code is not None else "")
            last = f"attempt {run.attempt}: {what or 'failed'}"
        return cls(
            **_job_fields(job),
            spec=_shown_spec(job),
            runs=[Run.from_record(run) for run in runs],
            pending_reason=pending,
            dependencies=[Dependency.from_record(item) for item in job.dependencies],
            last_failure=last,
            members=members,
        )


class ArrayDetail(BaseModel):
    """A job array as one: its elements' counts by state, and the elements themselves."""

    id: str
    name: str = Field(description="The name the array was submitted with (elements: NAME-i).")
    queue: str
    size: int
    parallelism: int | None
    counts: dict[str, int] = Field(description="Elements by state (states with none left out).")
    jobs: list[Job] = Field(description="The elements, by index.")


class JobList(BaseModel):
    jobs: list[Job]
    next_cursor: int | None = Field(description="Pass as `after` for the next page; null: done.")
    total: int | None = Field(
        default=None, description="How many jobs match over all pages (asked with total=true)."
    )


class SubmittedJob(BaseModel):
    id: str
    name: str
    queue: str
    array_id: str | None = Field(default=None, description="The array of an array element.")


class SubmitResult(BaseModel):
    ids: list[str]
    jobs: list[SubmittedJob]


MAX_REASON = 4096
MAX_PRIORITY = 1_000_000_000
LABEL_KEY = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,252}$"
"""What a label key in a filter may be: a letter or digit, then letters, digits, ``._/-``."""

Reason = Annotated[str, Field(max_length=MAX_REASON)]

MAX_LABEL_FILTERS = 64
"""Labels one filter or bulk cancel may match on: each is a condition of the query, and
SQLite refuses a query of 1,000 (a 10,000-label cancel was a 500)."""


class CancelBody(_Closed):
    reason: Reason = "cancelled by user"


class EngineReplica(BaseModel):
    """One replica of a run and the engine's own id for it."""

    task: str
    replica: int
    node: str
    engine_id: str | None = Field(
        description="As the engine's own tools show it: the Ray submission id, the Slurm job "
        "id, the Kubernetes Job name (and pod index), `pid N` of a local process group; null "
        "when the engine gives none (yet)."
    )


class EngineIds(BaseModel):
    """A run's replicas as its engine names them (``flotilla describe``)."""

    run_id: str
    attempt: int
    cluster: str
    replicas: list[EngineReplica]


class HoldBody(_Closed):
    """Why a job is held or released (the event's reason; the default names the caller)."""

    reason: Reason = ""


class BulkCancelBody(_Closed):
    """A queue and/or labels: never every job."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": [
                {"required": ["queue"], "properties": {"queue": {"type": "string"}}},
                {"required": ["labels"], "properties": {"labels": {"minProperties": 1}}},
            ]
        },
    )

    queue: str | None = Field(default=None, max_length=253)
    labels: dict[Annotated[str, Field(pattern=LABEL_KEY)], Reason] = Field(
        default={},
        max_length=MAX_LABEL_FILTERS,
        json_schema_extra={"additionalProperties": False},  # only keys of the pattern
    )
    reason: Reason = "cancelled by user"


class CancelResult(BaseModel):
    cancelled: list[Job] = Field(
        description="Jobs cancelled now, or asked to stop (cancel_requested) if they were active."
    )


class PriorityBody(_Closed):
    priority: int = Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY)
    reason: Reason = ""


class Event(BaseModel):
    id: int
    job_id: str
    run_id: str | None
    time: datetime
    kind: str
    from_state: str | None
    to_state: str | None
    reason: str

    @classmethod
    def from_record(cls, event: EventRecord) -> Event:
        return cls(
            id=event.id,
            job_id=event.job_id,
            run_id=event.run_id,
            time=event.time,
            kind=event.kind,
            from_state=None if event.from_state is None else event.from_state.value,
            to_state=None if event.to_state is None else event.to_state.value,
            reason=event.reason,
        )


class LogChunk(BaseModel):
    run_id: str
    stream: str
    offset: int
    next_offset: int = Field(description="Pass as `offset` to read on.")
    data: str
    complete: bool = Field(description="The run has ended and this chunk reaches the end.")


class Cluster(BaseModel):
    name: str
    backend: str
    labels: dict[str, str]
    state: str
    heartbeat_at: datetime | None
    updated_at: datetime
    spec: dict[str, Any]
    nodes: int = 0
    """How many nodes its backend reported last."""
    capacity: dict[str, float] = {}
    """Sum over its nodes, per resource in base units (``gpu`` counts devices)."""
    allocated: dict[str, float] = {}
    """What its active runs hold, per resource in base units."""
    reason: str | None = None
    """Why an unreachable cluster is so, as the database keeps it (its backend could not be
    built: a secret reference that does not resolve, a setting of the wrong type; or it
    stopped answering). Never a secret's value."""

    @classmethod
    def from_record(
        cls,
        cluster: ClusterRecord,
        allocated: dict[str, float] | None = None,
        reason: str | None = None,
    ) -> Cluster:
        capacity: dict[str, float] = {}
        count = 0
        for group in cluster.spec.get("nodes") or []:
            times = group.get("count") or 1
            count += times
            amounts = dict(group.get("resources", {}))
            if group.get("gpus"):
                amounts["gpu"] = group["gpus"].get("count", 0)
            for name, amount in amounts.items():
                capacity[name] = capacity.get(name, 0.0) + float(amount) * times
        return cls(
            name=cluster.name,
            backend=cluster.backend,
            labels=dict(cluster.labels),
            state=cluster.state,
            heartbeat_at=cluster.heartbeat_at,
            updated_at=cluster.updated_at,
            spec=dict(cluster.spec),
            nodes=count,
            capacity=capacity,
            allocated=dict(allocated or {}),
            reason=reason,
        )


class Node(BaseModel):
    cluster: str
    name: str
    resources: dict[str, float]
    labels: dict[str, str]
    state: str
    heartbeat_at: datetime | None
    gpus: dict[str, Any] | None = None
    """The node's GPU inventory (``count``, ``memory`` per device, ``model``, ``topology``…),
    which ``resources`` leaves out."""

    @classmethod
    def from_record(cls, node: NodeRecord) -> Node:
        gpus = node.spec.get("gpus")
        return cls(
            cluster=node.cluster,
            name=node.name,
            resources=dict(node.resources),
            labels=dict(node.labels),
            state=node.state,
            heartbeat_at=node.heartbeat_at,
            gpus=dict(gpus) if gpus else None,
        )


class QuotaLevel(BaseModel):
    """One quota on the path from the tree's root to a queue's own quota."""

    name: str
    min: dict[str, float]
    max: dict[str, float] | None
    lending_limit: dict[str, float] | None
    weight: float


class Why(BaseModel):
    """Everything that explains where a job stands, in one answer."""

    job_id: str
    name: str
    queue: str
    state: str
    waiting: bool
    reason: str
    cancel_requested: bool
    queue_position: int | None = Field(description="1-based, among the queue's queued jobs.")
    queued_in_queue: int
    quota: list[QuotaLevel] = Field(description="The queue's quota and its ancestors, root first.")
    queue_running: int | None = Field(description="From the last scheduling cycle, if known.")
    queue_dominant_share: float | None
    summary: str
    waiting_for: list[Dependency] = Field(
        default=[],
        description="The dependencies of a queued job not met yet, with their states now.",
    )
    estimated_start: StartEstimate | None = Field(
        default=None, description="A waiting job's expected start (see `JobDetail`)."
    )
    start_unknown: str | None = Field(
        default=None, description="Why it has no `estimated_start` (see `JobDetail`)."
    )


class Report(BaseModel):
    scheduler: dict[str, Any] | None = Field(
        description="The last scheduling cycle, or null when no scheduler runs in this process."
    )
    queues: dict[str, dict[str, int]] = Field(description="Jobs per queue and state (store).")


class Health(BaseModel):
    status: str
    detail: str = ""


class RunUse(BaseModel):
    """One run as ``flotilla sacct`` shows it: whose, where, how it ended and what it used.
    Figures that were not measured are null (``docs/cli.md``, sacct)."""

    run: str
    job: str
    name: str
    queue: str
    owner: str | None
    attempt: int
    cluster: str
    nodes: list[str] = Field(description="The nodes its replicas were placed on.")
    state: str = Field(description="The run's state.")
    exit_code: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    elapsed_seconds: float | None = Field(
        description="From its start to its end (to now while it runs); null: never started."
    )
    cpu_seconds: float | None = Field(
        description="CPU seconds used, all replicas (Slurm's TotalCPU); null: not measured."
    )
    memory_peak: int | None = Field(
        description="Peak memory of its largest replica, bytes (Slurm's MaxRSS)."
    )
    gpu: RunGpu | None = None

    @classmethod
    def from_row(cls, row: RunReportRow, now: datetime) -> RunUse:
        elapsed = None
        if row.started_at is not None:
            end = row.finished_at or now
            elapsed = max(0.0, (end - row.started_at).total_seconds())
        return cls(
            run=row.run_id,
            job=row.job_id,
            name=row.name,
            queue=row.queue,
            owner=row.owner,
            attempt=row.attempt,
            cluster=row.cluster,
            nodes=list(row.nodes),
            state=row.state.value,
            exit_code=row.exit_code,
            created_at=row.created_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
            elapsed_seconds=elapsed,
            cpu_seconds=row.cpu_seconds,
            memory_peak=row.memory_peak,
            gpu=RunGpu.of(row.gpu),
        )


class RunUseReport(BaseModel):
    """``GET /v1/runs``: the runs active at or after ``since``, oldest first."""

    since: datetime
    runs: list[RunUse]
