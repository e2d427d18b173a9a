"""What the store hands out: immutable plain records, detached from any database session.

They are frozen so the JobDb can share them between snapshots without copying.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from flotilla.model import ClusterSpec, DependencyCondition, JobSpec, QueueSpec, QuotaSpec
from flotilla.model.gpu_use import GpuUse
from flotilla.store.states import JobState, RunState


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One attempt of a job on a cluster."""

    id: str
    job_id: str
    attempt: int
    cluster: str
    assignment: Mapping[str, Any]
    """Placement as the scheduler decided it, in its one JSON form
    (``flotilla.framework.assignment_record``), e.g. ``{"cluster": "east", "placements":
    [{"task": "worker", "replica": 0, "node": "gpu-3", "gpus": [0, 1], "shares": [[0, 1.0],
    [1, 1.0]], "gpu_memory": 0.0}]}``; the store keeps it as given. Read it with
    ``AssignmentRecord.unmarshal``."""
    state: RunState
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    message: str | None = None
    gpu: GpuUse | None = None
    """Its GPU use as its backend last reported it (``store/gpu_use.py``); filled by
    ``Store.runs`` only."""
    last_checkpoint_at: datetime | None = None
    """When the run last reported a checkpoint (``flotilla.checkpoint()``), if it did."""
    cpu_seconds: float | None = None
    """CPU seconds its processes used (summed over replicas), measured when it ended; None:
    not measured (``model/run_resources.py``)."""
    memory_peak: int | None = None
    """The largest peak memory of one of its replicas, bytes; None: not measured."""


@dataclass(frozen=True, slots=True)
class DependencyRecord:
    """A dependency as resolved at submission: the job it names, for good."""

    job_id: str
    job: str
    """The job as the submitter named it (a name, ``QUEUE/NAME`` or an id)."""
    condition: DependencyCondition


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job as stored, with its latest run (the active one while the job is active)."""

    id: str
    name: str
    queue: str
    spec: JobSpec
    state: JobState
    priority: int
    submitted_at: datetime
    updated_at: datetime
    submit_serial: int
    """Serial at submission: unique, never changes, so it orders jobs by submission."""
    serial: int
    """Serial of the last write to this job or its runs."""
    owner: str | None
    labels: Mapping[str, str] = field(default_factory=dict)
    cancel_requested: bool = False
    reason: str = ""
    """Why the job is in its state: the reason of its last transition."""
    run: RunRecord | None = None
    dependencies: tuple[DependencyRecord, ...] = ()
    """The jobs this one waits for (``depends_on``), resolved to ids at submission."""
    not_before: datetime | None = None
    """While queued after a failed attempt: not scheduled before this time (retry backoff)."""
    array_id: str | None = None
    """The array this job is an element of, and its index in it."""
    array_index: int | None = None


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One line of a job's history."""

    id: int
    job_id: str
    run_id: str | None
    time: datetime
    kind: str
    """``submitted``, ``transition``, ``cancel_requested``, ``reprioritized`` or ``expanded`` (a
    non-strict gang's run took more replicas)."""
    from_state: JobState | None
    to_state: JobState | None
    reason: str


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of a job listing; pass ``next_cursor`` back as ``after`` for the next."""

    jobs: list[JobRecord]
    next_cursor: int | None


@dataclass(frozen=True, slots=True)
class NodeRecord:
    cluster: str
    name: str
    resources: Mapping[str, float]
    labels: Mapping[str, str]
    spec: Mapping[str, Any]
    """The node's ``NodeGroup`` (with no count) as JSON data."""
    state: str
    heartbeat_at: datetime | None


@dataclass(frozen=True, slots=True)
class ClusterRecord:
    name: str
    backend: str
    labels: Mapping[str, str]
    spec: Mapping[str, Any]
    """The ``ClusterSpec`` as JSON data."""
    state: str
    heartbeat_at: datetime | None
    updated_at: datetime
    reason: str | None = None
    """Why an unreachable cluster is so, as the replica that found it said (never a secret's
    value); None while it is ready."""


@dataclass(frozen=True, slots=True)
class Lease:
    """A held leader lease. ``token`` grows every time the lease changes hands (fencing)."""

    name: str
    holder: str
    token: int
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class FleetRecord:
    """The fleet in force: the applied fleet file as JSON data (secret references, never
    their values) and its version (grows on every apply)."""

    version: int
    document: Mapping[str, Any]
    applied_at: datetime


@dataclass(frozen=True, slots=True)
class FleetChange:
    """Everything one fleet apply writes, in one transaction.

    ``queues`` and ``quotas`` replace the catalog's (queues left out are deleted, which the
    store refuses for a queue that has jobs). Of ``clusters``, a new one is inserted
    ``unreachable`` (with the file's nodes, possibly none) until its backend answers; an
    existing one keeps its nodes and state and takes the new backend, labels and cost.
    Clusters not in ``clusters`` are deleted (refused while a job is active on one).
    ``expected_version`` makes the apply conditional: another apply in between is a
    conflict, not a lost update.
    """

    document: Mapping[str, Any]
    queues: Sequence[QueueSpec]
    quotas: Sequence[QuotaSpec]
    clusters: Sequence[ClusterSpec] = ()
    expected_version: int | None = None
