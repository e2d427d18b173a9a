"""The per-run report (``flotilla sacct``, ``GET /v1/runs``): each run of the selected jobs
with what it used, and the CPU time and peak memory its backend measured when it ended
(``runs.cpu_seconds``, ``runs.memory_peak``, migration 0011).

A run is in the report when it was active at some time at or after ``since`` (created then,
or not finished before it), as Slurm's ``sacct -S`` selects jobs. Filters are the job's queue
and owner and the run's state; ``visible_queues``/``visible_owner`` restrict the report to
what a caller may read, as ``UsageQuery`` does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, Text, and_, bindparam, or_, select, update
from sqlalchemy import cast as sql_cast
from sqlalchemy.orm import Session

from flotilla.framework.assignment_record import AssignmentRecord
from flotilla.model.gpu_use import GpuUse
from flotilla.model.run_resources import RunResources
from flotilla.store.gpu_use import gpu_use_of
from flotilla.store.schema import Job, Run
from flotilla.store.states import RunState

REPORT_LIMIT = 10_000
"""The most runs one report holds (the newest of those selected)."""


@dataclass(frozen=True)
class RunReportQuery:
    """Which runs to report. ``None`` filters nothing; ``states`` are run states."""

    since: datetime
    queues: frozenset[str] | None = None
    owner: str | None = None
    states: frozenset[RunState] | None = None
    visible_queues: frozenset[str] | None = None
    visible_owner: str | None = None
    limit: int = REPORT_LIMIT

    def __post_init__(self) -> None:
        if self.since.tzinfo is None:
            raise ValueError("since: give a timezone-aware datetime")
        if not 1 <= self.limit <= REPORT_LIMIT:
            raise ValueError(f"limit: must be between 1 and {REPORT_LIMIT}, not {self.limit}")


@dataclass(frozen=True, slots=True)
class RunReportRow:
    """One run, as ``sacct`` shows a job step: whose, where, how it ended and what it used."""

    run_id: str
    job_id: str
    name: str
    queue: str
    owner: str | None
    attempt: int
    cluster: str
    nodes: tuple[str, ...]
    """The distinct nodes its replicas were placed on, in placement order."""
    state: RunState
    exit_code: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cpu_seconds: float | None
    memory_peak: int | None
    gpu: GpuUse | None


def record_run_resources(session: Session, resources: Mapping[str, RunResources]) -> None:
    """Keep each run's measured CPU time and peak memory (a repeated report rewrites them):
    one bulk update by primary key, so a thousand runs ending at once are one statement."""
    # Core's executemany, not the ORM's bulk update: a run the store does not hold (a report
    # of an orphan) updates nothing instead of failing the write.
    rows = [
        {"run_id": run_id, "cpu": used.cpu_seconds, "peak": used.memory_peak}
        for run_id, used in resources.items()
    ]
    runs = cast(Table, Run.__table__)
    statement = (
        update(runs)
        .where(runs.c.id == bindparam("run_id"))
        .values(cpu_seconds=bindparam("cpu"), memory_peak=bindparam("peak"))
    )
    session.connection().execute(statement, rows)


def run_report(session: Session, query: RunReportQuery) -> list[RunReportRow]:
    """The selected runs, oldest first (the newest ``query.limit`` of them)."""
    runs, jobs = Run.__table__.c, Job.__table__.c
    statement = (
        select(
            runs.id,
            runs.job_id,
            jobs.name,
            jobs.queue,
            jobs.owner,
            runs.attempt,
            runs.cluster,
            sql_cast(runs.assignment, Text),
            runs.state,
            runs.exit_code,
            runs.created_at,
            runs.started_at,
            runs.finished_at,
            runs.cpu_seconds,
            runs.memory_peak,
        )
        .join(Job.__table__, jobs.id == runs.job_id)
        .where(or_(runs.finished_at.is_(None), runs.finished_at >= query.since))
    )
    if query.queues is not None:
        statement = statement.where(jobs.queue.in_(sorted(query.queues)))
    if query.owner is not None:
        statement = statement.where(jobs.owner == query.owner)
    if query.states is not None:
        statement = statement.where(runs.state.in_(sorted(state.value for state in query.states)))
    if query.visible_queues is not None or query.visible_owner is not None:
        statement = statement.where(
            or_(
                jobs.queue.in_(sorted(query.visible_queues or ())),
                and_(jobs.owner.is_not(None), jobs.owner == (query.visible_owner or "")),
            )
        )
    statement = statement.order_by(runs.created_at.desc(), runs.id.desc()).limit(query.limit)
    found = list(reversed(session.execute(statement).all()))
    uses = gpu_use_of(session, [row[0] for row in found])
    return [
        RunReportRow(
            run_id=row[0],
            job_id=row[1],
            name=row[2],
            queue=row[3],
            owner=row[4],
            attempt=row[5],
            cluster=row[6],
            nodes=_nodes(row[7]),
            state=RunState(row[8]),
            exit_code=row[9],
            created_at=row[10],
            started_at=row[11],
            finished_at=row[12],
            cpu_seconds=row[13],
            memory_peak=row[14],
            gpu=uses.get(row[0]),
        )
        for row in found
    ]


def _nodes(assignment_text: str | None) -> tuple[str, ...]:
    data = json.loads(assignment_text) if assignment_text else {}
    return tuple(AssignmentRecord.unmarshal(data).nodes)
