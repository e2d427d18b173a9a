"""Accounting: CPU-, memory- and GPU-hours that runs held over a time range (``sacct``).

A run holds, for every placed replica, its task's request (base units: cores, bytes, GPUs)
from the time it started running until it finished; a run still running counts up to now. A
run that ended without ever being seen running (a short job whose end was the first report)
counts from its creation; one cancelled, preempted or returned before it ran counts nothing.
Each run is clipped to the range ``[since, until)``.

The database does the selecting and the time arithmetic: which runs overlap the range, whose
jobs the caller may see, and each run's clipped seconds (``julianday`` on SQLite,
``extract(epoch …)`` on PostgreSQL). Python multiplies by the requests, read once per job.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import ColumnElement, Float, Text, and_, case, cast, func, literal, or_, select
from sqlalchemy.orm import Session

from flotilla.framework.assignment_record import AssignmentRecord
from flotilla.store.jobs import chunks
from flotilla.store.schema import Job, Run, RunGpuUse, UtcDateTime
from flotilla.store.states import RunState

GIB = float(2**30)
HOUR = 3600.0


class UsageGrouping(StrEnum):
    QUEUE = "queue"
    OWNER = "owner"
    JOB = "job"


@dataclass(frozen=True, slots=True)
class UsageQuery:
    """What to account for. ``visible_queues``/``visible_owner`` restrict it to what a caller
    may read: jobs of those queues, or of that owner in any queue. Both None: every job."""

    since: datetime
    until: datetime
    by: UsageGrouping = UsageGrouping.QUEUE
    visible_queues: frozenset[str] | None = None
    visible_owner: str | None = None

    def __post_init__(self) -> None:
        if self.since.tzinfo is None or self.until.tzinfo is None:
            raise ValueError("usage range: give timezone-aware datetimes")
        if self.until <= self.since:
            raise ValueError("usage range: until must be after since")


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One group's consumption. ``key`` names the group: ``{"queue": …}``, ``{"owner": …}``,
    or ``{"job": id, "name": …, "queue": …, "owner": …}``."""

    key: Mapping[str, str | None]
    jobs: int
    runs: int
    elapsed_hours: float
    """Wall-clock hours the group's runs ran within the range (summed over runs)."""
    cpu_hours: float
    memory_gib_hours: float
    gpu_hours: float
    gpu_used_hours: float = 0.0
    """GPU-hours its runs kept GPUs busy, as their backends measured it (``gpu_use.py``): a
    run's measured figure times the part of the run inside the range. Runs never measured
    (no GPU, an engine that does not report) add nothing."""
    gpu_efficiency: float | None = None
    """Used over held, of the measured runs only (``seff``'s efficiency for GPUs); None when
    none was measured."""

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.key,
            "jobs": self.jobs,
            "runs": self.runs,
            "elapsed_hours": self.elapsed_hours,
            "cpu_hours": self.cpu_hours,
            "memory_gib_hours": self.memory_gib_hours,
            "gpu_hours": self.gpu_hours,
            "gpu_used_hours": self.gpu_used_hours,
            "gpu_efficiency": self.gpu_efficiency,
        }


@dataclass(frozen=True, slots=True)
class UsageReport:
    since: datetime
    until: datetime
    by: UsageGrouping
    rows: list[UsageRow] = field(default_factory=list)
    """Largest CPU-hours first, then by key."""
    total: UsageRow | None = None


def _clamp(session: Session, pick: str, left: Any, right: Any) -> ColumnElement[Any]:
    """``max``/``min`` of two timestamps (``greatest``/``least`` on PostgreSQL)."""
    if session.get_bind().dialect.name == "postgresql":
        return getattr(func, "greatest" if pick == "max" else "least")(left, right)  # type: ignore[no-any-return]
    return getattr(func, pick)(left, right)  # type: ignore[no-any-return]


def _seconds_between(session: Session, start: Any, end: Any) -> ColumnElement[float]:
    if session.get_bind().dialect.name == "postgresql":
        return cast(func.extract("epoch", end - start), Float)
    return (func.julianday(end) - func.julianday(start)) * 86400.0


def compute_usage(session: Session, query: UsageQuery, now: datetime) -> UsageReport:
    runs = Run.__table__.c
    jobs = Job.__table__.c
    since = literal(query.since, UtcDateTime())
    until = literal(query.until, UtcDateTime())
    ran_to_end = runs.state.in_([RunState.SUCCEEDED.value, RunState.FAILED.value])
    start = func.coalesce(runs.started_at, case((ran_to_end, runs.created_at)))
    end = func.coalesce(runs.finished_at, literal(now, UtcDateTime()))
    clipped_start = _clamp(session, "max", start, since)
    clipped_end = _clamp(session, "min", end, until)
    seconds = _seconds_between(session, clipped_start, clipped_end).label("seconds")
    whole = _seconds_between(session, start, end).label("whole")
    gpu = RunGpuUse.__table__.c
    statement = (
        select(
            runs.job_id,
            jobs.queue,
            jobs.owner,
            jobs.name,
            seconds,
            cast(runs.assignment, Text),
            whole,
            gpu.held_gpu_seconds,
            gpu.used_gpu_seconds,
        )
        .join(Job.__table__, jobs.id == runs.job_id)
        .outerjoin(RunGpuUse.__table__, gpu.run_id == runs.id)
        .where(start.is_not(None), start < until, end > since)
    )
    if query.visible_queues is not None or query.visible_owner is not None:
        statement = statement.where(
            or_(
                jobs.queue.in_(sorted(query.visible_queues or ())),
                and_(jobs.owner.is_not(None), jobs.owner == (query.visible_owner or "")),
            )
        )
    found = session.execute(statement).all()
    requests = _task_requests(session, {row[0] for row in found})
    groups: dict[tuple[str | None, ...], _Sums] = {}
    for job_id, queue, owner, name, run_seconds, assignment_text, *measured in found:
        run_seconds = max(0.0, float(run_seconds or 0.0))
        key = _key(query.by, job_id, queue, owner, name)
        sums = groups.setdefault(tuple(key.values()), _Sums(key))
        sums.add(job_id, run_seconds, _held(requests.get(job_id, {}), assignment_text))
        whole_seconds, held_measured, used_measured = measured
        if held_measured is not None:
            inside = min(1.0, run_seconds / whole_seconds) if whole_seconds else 1.0
            sums.gpu_measured_held += float(held_measured) * inside
            sums.gpu_measured_used += float(used_measured) * inside
    rows = sorted(
        (sums.row() for sums in groups.values()),
        key=lambda row: (-row.cpu_hours, [str(value) for value in row.key.values()]),
    )
    total = _Sums({"total": None})
    for sums in groups.values():
        total.merge(sums)
    return UsageReport(query.since, query.until, query.by, rows, total.row())


def _key(
    by: UsageGrouping, job_id: str, queue: str, owner: str | None, name: str
) -> dict[str, str | None]:
    if by is UsageGrouping.QUEUE:
        return {"queue": queue}
    if by is UsageGrouping.OWNER:
        return {"owner": owner}
    return {"job": job_id, "name": name, "queue": queue, "owner": owner}


def _task_requests(session: Session, job_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Per job, each task's resource request (base units), read once per job."""
    jobs = Job.__table__.c
    requests: dict[str, dict[str, Any]] = {}
    for part in chunks(sorted(job_ids)):
        statement = select(jobs.id, cast(jobs.spec, Text)).where(jobs.id.in_(part))
        for job_id, spec_text in session.execute(statement):
            spec = json.loads(spec_text)
            requests[job_id] = {
                task["name"]: task.get("resources") or {} for task in spec.get("tasks", [])
            }
    return requests


def _held(requests: Mapping[str, Any], assignment_text: str | None) -> dict[str, float]:
    """What one run holds: its placed replicas' task requests, summed."""
    held = {"cpu": 0.0, "memory": 0.0, "gpu": 0.0}
    assignment = AssignmentRecord.unmarshal(json.loads(assignment_text) if assignment_text else {})
    for placement in assignment.placements:
        for name in held:
            held[name] += float(requests.get(placement.task, {}).get(name, 0.0))
    return held


@dataclass
class _Sums:
    key: Mapping[str, str | None]
    job_ids: set[str] = field(default_factory=set)
    runs: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    memory_byte_seconds: float = 0.0
    gpu_seconds: float = 0.0
    gpu_measured_held: float = 0.0
    gpu_measured_used: float = 0.0

    def add(self, job_id: str, seconds: float, held: Mapping[str, float]) -> None:
        self.job_ids.add(job_id)
        self.runs += 1
        self.seconds += seconds
        self.cpu_seconds += held["cpu"] * seconds
        self.memory_byte_seconds += held["memory"] * seconds
        self.gpu_seconds += held["gpu"] * seconds

    def merge(self, other: _Sums) -> None:
        self.job_ids |= other.job_ids
        self.runs += other.runs
        self.seconds += other.seconds
        self.cpu_seconds += other.cpu_seconds
        self.memory_byte_seconds += other.memory_byte_seconds
        self.gpu_seconds += other.gpu_seconds
        self.gpu_measured_held += other.gpu_measured_held
        self.gpu_measured_used += other.gpu_measured_used

    def row(self) -> UsageRow:
        return UsageRow(
            key=dict(self.key),
            jobs=len(self.job_ids),
            runs=self.runs,
            elapsed_hours=self.seconds / HOUR,
            cpu_hours=self.cpu_seconds / HOUR,
            memory_gib_hours=self.memory_byte_seconds / GIB / HOUR,
            gpu_hours=self.gpu_seconds / HOUR,
            gpu_used_hours=self.gpu_measured_used / HOUR,
            gpu_efficiency=(
                self.gpu_measured_used / self.gpu_measured_held
                if self.gpu_measured_held > 0
                else None
            ),
        )


DECAY_HORIZON_HALF_LIVES = 30.0
"""Runs that ended more than this many half-lives ago add less than 2^-30 of their usage:
the history read at start stops there."""


def decayed_usage(session: Session, now: datetime, half_life: float) -> dict[str, dict[str, float]]:
    """Each queue's usage decayed to ``now`` with ``half_life`` (resource name → resource-
    seconds, base units), derived from run history: the service's fair-share ledger
    (``flotilla.scheduler.decayed_usage``) starts from it after a restart.

    A run held its request from start to end (a run still running: to ``now``), the same
    runs ``compute_usage`` counts; it adds ``held · τ · (2^(-(now-end)/h) − 2^(-(now-start)/h))``
    with ``τ = h / ln 2``, the integral the engine's accumulator keeps.
    """
    runs = Run.__table__.c
    jobs = Job.__table__.c
    moment = literal(now, UtcDateTime())
    ran_to_end = runs.state.in_([RunState.SUCCEEDED.value, RunState.FAILED.value])
    start = func.coalesce(runs.started_at, case((ran_to_end, runs.created_at)))
    end = _clamp(session, "min", func.coalesce(runs.finished_at, moment), moment)
    since_start = _seconds_between(session, start, moment).label("since_start")
    since_end = _seconds_between(session, end, moment).label("since_end")
    horizon = now.timestamp() - DECAY_HORIZON_HALF_LIVES * half_life
    oldest = datetime.fromtimestamp(max(horizon, 0.0), tz=now.tzinfo)
    statement = (
        select(runs.job_id, jobs.queue, since_start, since_end, cast(runs.assignment, Text))
        .join(Job.__table__, jobs.id == runs.job_id)
        .where(start.is_not(None), start < moment, end > literal(oldest, UtcDateTime()))
    )
    found = session.execute(statement).all()
    requests = _task_requests(session, {row[0] for row in found})
    mean_life = half_life / math.log(2)
    usage: dict[str, dict[str, float]] = {}
    for job_id, queue, age_start, age_end, assignment_text in found:
        age_start, age_end = float(age_start or 0.0), max(0.0, float(age_end or 0.0))
        if age_start <= age_end:
            continue
        factor = mean_life * (2.0 ** (-age_end / half_life) - 2.0 ** (-age_start / half_life))
        held = _held_by_name(requests.get(job_id, {}), assignment_text)
        sums = usage.setdefault(queue, {})
        for name, amount in held.items():
            sums[name] = sums.get(name, 0.0) + amount * factor
    return usage


def _held_by_name(requests: Mapping[str, Any], assignment_text: str | None) -> dict[str, float]:
    """What one run holds, every resource of its placed replicas' requests summed."""
    held: dict[str, float] = {}
    assignment = AssignmentRecord.unmarshal(json.loads(assignment_text) if assignment_text else {})
    for placement in assignment.placements:
        for name, amount in (requests.get(placement.task) or {}).items():
            if isinstance(amount, int | float):
                held[name] = held.get(name, 0.0) + float(amount)
    return held
