"""Reading jobs as records: the change feed (``jobs_since``), one job, and jobs just written.

Jobs are read as Core rows joined with their latest run in one query (no ORM identity map:
nothing read here is written back). The spec is read as text and parsed through the
``SpecCache``, labels and run assignments are decoded on first access. Reading rows and
making records are separate steps, so a writer can read the feed inside its transaction and
build the records after the commit, without holding its locks meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from sqlalchemy import ColumnElement, Select, Table, Text, select
from sqlalchemy import cast as sql_cast
from sqlalchemy.orm import Session

from flotilla.store.bulk import among, batches
from flotilla.store.convert import AnyRow, SpecCache, job_record, lazy_json, paced
from flotilla.store.records import JobRecord, RunRecord
from flotilla.store.schema import Job, Run
from flotilla.store.states import TERMINAL_JOB_STATES, JobState, RunState

JOBS = cast(Table, Job.__table__)
RUNS = cast(Table, Run.__table__)

_JOB_COLUMNS: tuple[Any, ...] = (
    *(column for column in JOBS.c if column.key not in ("spec", "labels")),
    sql_cast(JOBS.c.spec, Text).label("spec_text"),
    sql_cast(JOBS.c.labels, Text).label("labels_text"),
)
_RUN_COLUMNS: tuple[Any, ...] = (
    *(column.label(f"r_{column.key}") for column in RUNS.c if column.key != "assignment"),
    sql_cast(RUNS.c.assignment, Text).label("r_assignment_text"),
)


def select_jobs(*where: ColumnElement[bool]) -> Select[Any]:
    """Jobs with their latest run (``r_``-prefixed columns, null without one)."""
    return (
        select(*_JOB_COLUMNS, *_RUN_COLUMNS)
        .select_from(JOBS.outerjoin(RUNS, RUNS.c.id == JOBS.c.run_id))
        .where(*where)
    )


def rows_since(session: Session, serial: int, limit: int | None) -> list[AnyRow]:
    """Rows of the jobs whose serial is greater than ``serial``, by serial."""
    query = select_jobs(JOBS.c.serial > serial).order_by(JOBS.c.serial)
    if limit is not None:
        query = query.limit(limit)
    return list(session.execute(query).all())


def rows_by_id(session: Session, job_ids: Sequence[str]) -> dict[str, AnyRow]:
    rows: dict[str, AnyRow] = {}
    for part in batches(session, sorted(set(job_ids))):
        for row in session.execute(select_jobs(among(session, JOBS.c.id, part))):
            rows[row.id] = row
    return rows


def to_records(
    rows: Sequence[AnyRow], specs: SpecCache, pace: Callable[[], None] | None = None
) -> list[JobRecord]:
    """The rows' records (specs parsed through the cache); ``pace`` is called between rows:
    a thousand new jobs are tens of milliseconds of parsing."""
    return [
        job_record(
            row,
            _run(row),
            specs.spec(row.id, row.spec_text, last=JobState(row.state) in TERMINAL_JOB_STATES),
            lazy_json(row.labels_text),
        )
        for row in paced(rows, pace)
    ]


RUN_FIELDS = ("id", "job_id", "attempt", "cluster", "created_at", "started_at", "finished_at")
RUN_RESULTS = ("exit_code", "message", "last_checkpoint_at", "cpu_seconds", "memory_peak")


def _run(row: AnyRow) -> RunRecord | None:
    """The ``r_`` columns of a row of ``select_jobs`` as the job's latest run."""
    if row.r_id is None:
        return None
    values = row._mapping
    return RunRecord(
        **{name: values[f"r_{name}"] for name in (*RUN_FIELDS, *RUN_RESULTS)},
        state=RunState(row.r_state),
        assignment=lazy_json(row.r_assignment_text),
    )
