"""A scheduler's writes to jobs: transitions and leases, applied in one pass.

A cycle's write (``SqlStore.commit_cycle``) holds the transitions of runs the backends
reported and the leases of the jobs just scheduled. Both are applied together: one query locks
every job concerned (``FOR UPDATE OF jobs``, in id order so lockers cannot deadlock) and reads
with it the job's latest run and its highest attempt; validation runs on plain dicts; then one
INSERT of the new runs, one UPDATE of the ended runs, one UPDATE of the jobs (each row once,
in its final version) and one INSERT of the events (``bulk.py``). On PostgreSQL that is seven
statements for a cycle where transitions and leases each took five of their own; every round
trip also gives up the interpreter to the API's threads.

The run columns are read in the lock's statement, not after it: runs are written only by the
lease holder, whose fence (checked first, share-locking the lease row) keeps any other writer
of runs out, so no run changes between the lock and the write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, func, select
from sqlalchemy.orm import Session

from flotilla.lifecycle.gangs import GROWTH_EVENT
from flotilla.store.bulk import among, batches, insert_rows, update_rows
from flotilla.store.errors import IllegalTransitionError, NotFoundError, StaleRunError
from flotilla.store.jobs import LOCK_COLUMNS, event_row, insert_events, new_id, reserve_serials
from flotilla.store.protocol import RunRequest, Transition
from flotilla.store.records import RunRecord
from flotilla.store.schema import Job, Run
from flotilla.store.states import (
    ACTIVE_JOB_STATES,
    RUN_STATE_FOR_JOB,
    JobState,
    RunState,
    is_allowed,
)

JOBS = cast(Table, Job.__table__)
RUNS = cast(Table, Run.__table__)
EARLIER_RUNS = RUNS.alias("earlier")

RUN_COLUMNS = ("id", "state", "started_at", "finished_at", "exit_code", "message")
"""What ending a run reads and rewrites (not its assignment JSON)."""


@dataclass
class Locked:
    """The locked jobs as dicts the pass updates as it goes, their latest runs, and the
    highest attempt of each job with a run."""

    jobs: dict[str, dict[str, Any]]
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)


def lock(session: Session, job_ids: Iterable[str], *, attempts: bool) -> Locked:
    """Lock the jobs and read their state, latest run and (``attempts``) highest attempt in
    one query; raises ``NotFoundError`` for unknown ids."""
    wanted = sorted(set(job_ids))
    columns: list[Any] = [
        *LOCK_COLUMNS,
        *(RUNS.c[name].label(f"r_{name}") for name in RUN_COLUMNS),
    ]
    if attempts:
        columns.append(
            select(func.max(EARLIER_RUNS.c.attempt))
            .where(EARLIER_RUNS.c.job_id == JOBS.c.id)
            .scalar_subquery()
            .label("attempt")
        )
    locked = Locked(jobs={})
    for part in batches(session, wanted):
        for row in session.execute(
            select(*columns)
            .select_from(JOBS.outerjoin(RUNS, RUNS.c.id == JOBS.c.run_id))
            .where(among(session, JOBS.c.id, part))
            .order_by(JOBS.c.id)
            .with_for_update(of=JOBS)
        ):
            values = row._mapping
            locked.jobs[row.id] = {column.key: values[column.key] for column in LOCK_COLUMNS}
            if row.r_id is not None:
                locked.runs[row.r_id] = {name: values[f"r_{name}"] for name in RUN_COLUMNS}
            if attempts and row.attempt is not None:
                locked.attempts[row.id] = int(row.attempt)
    missing = [job_id for job_id in wanted if job_id not in locked.jobs]
    if missing:
        raise NotFoundError(f"no such job(s): {', '.join(missing[:5])}")
    return locked


def write_jobs(
    session: Session, expected: Mapping[str, str], jobs: Sequence[Mapping[str, Any]]
) -> None:
    """Write the final version of each changed job in one statement (``bulk.update_rows``),
    each guarded by ``state = expected``: the row lock makes that hold, and a mismatch means a
    broken invariant, so the batch is refused rather than half applied. ``expected``: each
    job's state as locked."""
    update_rows(
        session,
        JOBS,
        [
            {
                "id": job["id"],
                "expected_state": expected[job["id"]],
                "state": job["state"],
                "run_id": job["run_id"],
                "cancel_requested": job["cancel_requested"],
                "reason": job["reason"],
                "serial": job["serial"],
                "updated_at": job["updated_at"],
                "not_before": job.get("not_before"),
            }
            for job in jobs
        ],
        key="id",
        expected="expected_state",
    )


def end_run(
    run: dict[str, Any],
    state: RunState,
    now: datetime,
    exit_code: int | None,
    message: str | None,
    *,
    started_at: datetime | None = None,
    finished_at: datetime | None = None,
) -> None:
    """Move ``run`` to ``state``; its start and end are the engine's times when given (never
    after ``now``, never an end before its start), else ``now``."""
    run["state"] = state.value
    if state is RunState.RUNNING and run["started_at"] is None:
        run["started_at"] = now if started_at is None else min(started_at, now)
    if state not in (RunState.LEASED, RunState.PENDING, RunState.RUNNING):
        end = now if finished_at is None else min(finished_at, now)
        run["finished_at"] = end if run["started_at"] is None else max(end, run["started_at"])
        run["exit_code"] = exit_code
        run["message"] = message
    elif message is not None:
        run["message"] = message


class Pass:
    """One pass over locked jobs: the changes accumulate here and ``write`` sends them."""

    def __init__(self, locked: Locked, now: datetime, serial: int) -> None:
        self.locked = locked
        self.now = now
        self.serial = serial
        self.expected = {job_id: job["state"] for job_id, job in locked.jobs.items()}
        self.touched: list[str] = []
        self.ended_runs: dict[str, dict[str, Any]] = {}
        self.new_runs: list[RunRecord] = []
        self.events: list[dict[str, Any]] = []

    def transition(self, change: Transition) -> None:
        job = self.locked.jobs[change.job_id]
        job_id, run_id = job["id"], job["run_id"]
        old = JobState(job["state"])
        new = change.new_state
        if new is JobState.LEASED:
            raise IllegalTransitionError(job_id, old, f"{new} (lease through record_run)")
        if not is_allowed(old, new):
            raise IllegalTransitionError(job_id, old, new)
        if change.run is not None and change.run != run_id:
            raise StaleRunError(f"job {job_id}: run {change.run} is not its latest run ({run_id})")
        if old in ACTIVE_JOB_STATES:
            run = self.locked.runs.get(run_id) if run_id else None
            if run is None:
                raise StaleRunError(f"job {job_id} is {old} but has no run")
            ended = change.run_state or RUN_STATE_FOR_JOB[new]
            end_run(
                run,
                ended,
                self.now,
                change.exit_code,
                change.message,
                started_at=change.started_at,
                finished_at=change.finished_at,
            )
            self.ended_runs[run["id"]] = run
        self._stamp(job, state=new.value, reason=change.reason, not_before=change.not_before)
        self.events.append(event_row(job, self.now, "transition", old, new, change.reason))

    def lease(self, request: RunRequest) -> None:
        job = self.locked.jobs[request.job_id]
        old = JobState(job["state"])
        if old is not JobState.QUEUED:
            raise IllegalTransitionError(job["id"], old, JobState.LEASED)
        attempt = self.locked.attempts.get(job["id"], 0) + 1
        self.locked.attempts[job["id"]] = attempt
        run = RunRecord(
            id=new_id(),
            job_id=job["id"],
            attempt=attempt,
            cluster=request.cluster,
            assignment=dict(request.assignment),
            state=RunState.LEASED,
            created_at=self.now,
        )
        self.new_runs.append(run)
        self._stamp(job, state=JobState.LEASED.value, run_id=run.id, reason=request.reason)
        self.events.append(
            event_row(job, self.now, "transition", old, JobState.LEASED, request.reason)
        )

    def _stamp(self, job: dict[str, Any], **values: Any) -> None:
        job.update(values, serial=self.serial, updated_at=self.now)
        self.serial += 1
        self.touched.append(job["id"])

    def write_runs(self, session: Session) -> None:
        """The new runs first: every run row exists before any job points at it."""
        insert_rows(session, RUNS, [_run_row(run) for run in self.new_runs])
        update_rows(session, RUNS, list(self.ended_runs.values()), key="id")

    def write_jobs(self, session: Session) -> None:
        jobs = self.locked.jobs
        write_jobs(session, self.expected, [jobs[job_id] for job_id in dict.fromkeys(self.touched)])
        insert_events(session, self.events)


def _run_row(run: RunRecord) -> dict[str, Any]:
    return {
        "id": run.id,
        "job_id": run.job_id,
        "attempt": run.attempt,
        "cluster": run.cluster,
        "assignment": run.assignment,
        "state": run.state.value,
        "created_at": run.created_at,
        "started_at": None,
        "finished_at": None,
        "exit_code": None,
        "message": None,
    }


def start(
    session: Session,
    changes: Sequence[Transition],
    requests: Sequence[RunRequest],
    now: datetime,
    serial: int | None,
) -> Pass:
    """Lock the jobs of ``changes`` and ``requests`` and apply them, transitions first, in
    order (serials too); nothing is written yet. ``serial``: the first of as many serials as
    changes and requests, reserved by the caller (None: reserve them here)."""
    if serial is None:
        serial = reserve_serials(session, len(changes) + len(requests))
    ids = [change.job_id for change in changes] + [request.job_id for request in requests]
    applied = Pass(lock(session, ids, attempts=bool(requests)), now, serial)
    for change in changes:
        applied.transition(change)
    for request in requests:
        applied.lease(request)
    return applied


def apply_transitions(
    session: Session, changes: Sequence[Transition], now: datetime, serial: int | None = None
) -> list[str]:
    """Apply ``changes`` in order and return the ids of the jobs changed, one per change."""
    if not changes:
        return []
    applied = start(session, changes, [], now, serial)
    applied.write_runs(session)
    applied.write_jobs(session)
    return applied.touched


def create_runs(
    session: Session, requests: Sequence[RunRequest], now: datetime, serial: int | None = None
) -> list[RunRecord]:
    """Lease queued jobs: a run each (attempt one more than the job's last), the job
    ``leased`` and pointing at it."""
    if not requests:
        return []
    applied = start(session, [], requests, now, serial)
    applied.write_runs(session)
    applied.write_jobs(session)
    return applied.new_runs


def grow_run(
    session: Session,
    job_id: str,
    run_id: str,
    assignment: Mapping[str, Any],
    reason: str,
    now: datetime,
) -> None:
    """A non-strict gang's run took more replicas: its assignment becomes ``assignment`` (the
    old placements and the new), the job a new serial (so every JobDb sees the nodes it now
    holds) and an ``expanded`` event (``GROWTH_EVENT``). Raises ``StaleRunError`` when
    ``run_id`` is not the job's active run any more (it ended, or the job was re-queued)."""
    serial = reserve_serials(session, 1)
    job = lock(session, [job_id], attempts=False).jobs[job_id]
    state = JobState(job["state"])
    if job["run_id"] != run_id or state not in ACTIVE_JOB_STATES:
        raise StaleRunError(f"job {job_id}: run {run_id} is not its active run any more")
    update_rows(session, RUNS, [{"id": run_id, "assignment": dict(assignment)}], key="id")
    update_rows(session, JOBS, [{"id": job_id, "serial": serial, "updated_at": now}], key="id")
    insert_events(session, [event_row(job, now, GROWTH_EVENT, state, state, reason)])
