"""Job writes inside one session: submission, state changes, runs and cancels.

Every function here runs inside the caller's transaction and takes its serials from
``reserve_serials`` before anything else: the counter row lock then orders all job writers
(see ``schema.Serial``), and as nobody waits for another lock while holding it, writers cannot
deadlock.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import and_, func, insert, or_, select, update
from sqlalchemy.orm import Session

from flotilla.model import JobSpec
from flotilla.store.errors import (
    ConflictError,
    DuplicateJobError,
    IllegalTransitionError,
    InvalidJobError,
    NotFoundError,
    StaleRunError,
)
from flotilla.store.protocol import RunRequest, Transition
from flotilla.store.schema import Event, Job, Queue, Run, Serial
from flotilla.store.states import (
    ACTIVE_JOB_STATES,
    RUN_STATE_FOR_JOB,
    TERMINAL_JOB_STATES,
    WAITING_JOB_STATES,
    JobState,
    RunState,
    is_allowed,
)

CHUNK = 500
"""Rows per IN (...) list: well under every database's bound-parameter limit."""

T = TypeVar("T")


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def new_id() -> str:
    return uuid.uuid4().hex


def reserve_serials(session: Session, count: int) -> int:
    """Take ``count`` serials; returns the first. Locks the counter row until commit."""
    last = session.execute(
        update(Serial)
        .where(Serial.name == "jobs")
        .values(value=Serial.value + count)
        .returning(Serial.value)
    ).scalar_one()
    return int(last) - count + 1


def latest_serial(session: Session) -> int:
    return int(session.execute(select(Serial.value).where(Serial.name == "jobs")).scalar_one())


def expand(batch: Sequence[JobSpec]) -> list[JobSpec]:
    """A spec with ``count`` N is N jobs; each stored spec names one job."""
    jobs: list[JobSpec] = []
    for spec in batch:
        if spec.count is None:
            jobs.append(spec)
        else:
            jobs.extend(
                spec.model_copy(update={"name": name, "count": None}) for name in spec.job_names()
            )
    return jobs


def check_batch(session: Session, jobs: Sequence[JobSpec]) -> None:
    queues = sorted({job.queue for job in jobs})
    known = set(session.scalars(select(Queue.name).where(Queue.name.in_(queues))))
    missing = [queue for queue in queues if queue not in known]
    if missing:
        raise InvalidJobError(f"no such queue(s): {', '.join(missing)}; nothing was submitted")
    names: dict[str, list[str]] = {}
    for job in jobs:
        names.setdefault(job.queue, []).append(job.name)
    for queue, queue_names in names.items():
        seen: set[str] = set()
        repeated: set[str] = set()
        for name in queue_names:
            (repeated if name in seen else seen).add(name)
        if repeated:
            raise DuplicateJobError(queue, sorted(repeated))
        taken: list[str] = []
        for part in chunks(sorted(seen)):
            taken.extend(
                session.scalars(select(Job.name).where(Job.queue == queue, Job.name.in_(part)))
            )
        if taken:
            raise DuplicateJobError(queue, sorted(taken))


def submit(
    session: Session, batch: Sequence[JobSpec], owner: str | None, now: datetime
) -> list[str]:
    jobs = expand(batch)
    if not jobs:
        return []
    check_batch(session, jobs)
    first = reserve_serials(session, len(jobs))
    ids = [new_id() for _ in jobs]
    rows: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for offset, (job_id, job) in enumerate(zip(ids, jobs, strict=True)):
        serial = first + offset
        rows.append(
            {
                "id": job_id,
                "name": job.name,
                "queue": job.queue,
                "spec": job.model_dump(mode="json"),
                "state": JobState.QUEUED.value,
                "priority": job.priority or 0,
                "submitted_at": now,
                "updated_at": now,
                "submit_serial": serial,
                "serial": serial,
                "labels": dict(job.labels),
                "owner": owner if owner is not None else job.user,
                "cancel_requested": False,
                "reason": "submitted",
                "run_id": None,
            }
        )
        events.append(
            {
                "job_id": job_id,
                "run_id": None,
                "time": now,
                "kind": "submitted",
                "from_state": None,
                "to_state": JobState.QUEUED.value,
                "reason": "submitted",
            }
        )
    for part in chunks(rows):
        session.execute(insert(Job), list(part))
    for part in chunks(events):
        session.execute(insert(Event), list(part))
    return ids


def lock_jobs(session: Session, job_ids: Iterable[str]) -> dict[str, Job]:
    """Load (and on PostgreSQL lock) the jobs; raises ``NotFoundError`` for unknown ids."""
    wanted = sorted(set(job_ids))
    found: dict[str, Job] = {}
    for part in chunks(wanted):
        for row in session.scalars(
            select(Job).where(Job.id.in_(part)).order_by(Job.id).with_for_update()
        ):
            found[row.id] = row
    missing = [job_id for job_id in wanted if job_id not in found]
    if missing:
        raise NotFoundError(f"no such job(s): {', '.join(missing[:5])}")
    return found


def add_event(
    session: Session,
    job: Job,
    now: datetime,
    kind: str,
    old: JobState | None,
    new: JobState | None,
    reason: str,
) -> None:
    session.add(
        Event(
            job_id=job.id,
            run_id=job.run_id,
            time=now,
            kind=kind,
            from_state=None if old is None else old.value,
            to_state=None if new is None else new.value,
            reason=reason,
        )
    )


def event_row(
    job: Job, now: datetime, kind: str, old: JobState | None, new: JobState | None, reason: str
) -> dict[str, Any]:
    """An event as a row for ``insert_events`` (what ``add_event`` adds as an object)."""
    return {
        "job_id": job.id,
        "run_id": job.run_id,
        "time": now,
        "kind": kind,
        "from_state": None if old is None else old.value,
        "to_state": None if new is None else new.value,
        "reason": reason,
    }


def insert_events(session: Session, events: Sequence[dict[str, Any]]) -> None:
    """Insert a batch's events in one statement per chunk: thousands of events as ORM objects
    were a third of a dispatch batch's time (identity map, unit of work), and nothing reads
    them back in the same transaction."""
    for part in chunks(events):
        session.execute(insert(Event), list(part))


def apply_transitions(
    session: Session, changes: Sequence[Transition], now: datetime, serial: int | None = None
) -> list[Job]:
    """``serial``: the first of ``len(changes)`` serials the caller already reserved."""
    if not changes:
        return []
    if serial is None:
        serial = reserve_serials(session, len(changes))
    jobs = lock_jobs(session, (change.job_id for change in changes))
    # One query for every active run the batch may end, instead of one per job.
    run_ids = [job.run_id for job in jobs.values() if job.run_id]
    runs = (
        {run.id: run for run in session.scalars(select(Run).where(Run.id.in_(run_ids)))}
        if run_ids
        else {}
    )
    touched: list[Job] = []
    events: list[dict[str, Any]] = []
    for change in changes:
        job = jobs[change.job_id]
        old = JobState(job.state)
        new = change.new_state
        if new is JobState.LEASED:
            raise IllegalTransitionError(job.id, old, f"{new} (lease through record_run)")
        if not is_allowed(old, new):
            raise IllegalTransitionError(job.id, old, new)
        if change.run is not None and change.run != job.run_id:
            raise StaleRunError(
                f"job {job.id}: run {change.run} is not its latest run ({job.run_id})"
            )
        if old in ACTIVE_JOB_STATES:
            run = runs.get(job.run_id) if job.run_id else None
            if run is None:
                raise StaleRunError(f"job {job.id} is {old} but has no run")
            end_run(run, RUN_STATE_FOR_JOB[new], now, change.exit_code, change.message)
        job.state = new.value
        job.reason = change.reason
        job.serial = serial
        job.updated_at = now
        serial += 1
        events.append(event_row(job, now, "transition", old, new, change.reason))
        touched.append(job)
    insert_events(session, events)
    return touched


def end_run(
    run: Run, state: RunState, now: datetime, exit_code: int | None, message: str | None
) -> None:
    run.state = state.value
    if state is RunState.RUNNING and run.started_at is None:
        run.started_at = now
    if state not in (RunState.LEASED, RunState.PENDING, RunState.RUNNING):
        run.finished_at = now
        run.exit_code = exit_code
        run.message = message
    elif message is not None:
        run.message = message


def create_runs(session: Session, requests: Sequence[RunRequest], now: datetime) -> list[Run]:
    if not requests:
        return []
    serial = reserve_serials(session, len(requests))
    jobs = lock_jobs(session, (request.job_id for request in requests))
    attempts: dict[str, int] = {}
    for job_id, attempt in session.execute(
        select(Run.job_id, func.max(Run.attempt))
        .where(Run.job_id.in_(list(jobs)))
        .group_by(Run.job_id)
    ):
        attempts[job_id] = attempt
    runs: list[Run] = []
    leased: set[str] = set()
    for request in requests:
        job = jobs[request.job_id]
        old = JobState.LEASED if job.id in leased else JobState(job.state)
        if old is not JobState.QUEUED:
            raise IllegalTransitionError(job.id, old, JobState.LEASED)
        leased.add(job.id)
        attempt = attempts.get(job.id, 0) + 1
        attempts[job.id] = attempt
        runs.append(
            Run(
                id=new_id(),
                job_id=job.id,
                attempt=attempt,
                cluster=request.cluster,
                assignment=dict(request.assignment),
                state=RunState.LEASED.value,
                created_at=now,
            )
        )
    # Every run row exists (one flush for the batch) before any job points at it.
    session.add_all(runs)
    session.flush()
    events: list[dict[str, Any]] = []
    for request, run in zip(requests, runs, strict=True):
        job = jobs[request.job_id]
        job.state = JobState.LEASED.value
        job.run_id = run.id
        job.reason = request.reason
        job.serial = serial
        job.updated_at = now
        serial += 1
        events.append(
            event_row(job, now, "transition", JobState.QUEUED, JobState.LEASED, request.reason)
        )
    insert_events(session, events)
    return runs


def cancel(session: Session, job_id: str, reason: str, now: datetime) -> Job:
    return cancel_many(session, [job_id], reason, now)[0]


def cancel_many(session: Session, job_ids: Sequence[str], reason: str, now: datetime) -> list[Job]:
    """Cancel jobs in the caller's transaction; an unknown id raises before anything changes."""
    if not job_ids:
        return []
    serial = reserve_serials(session, len(job_ids))
    jobs = lock_jobs(session, job_ids)
    cancelled: list[Job] = []
    for offset, job_id in enumerate(job_ids):
        cancelled.append(_cancel_locked(session, jobs[job_id], reason, now, serial + offset))
    return cancelled


def _cancel_locked(session: Session, job: Job, reason: str, now: datetime, serial: int) -> Job:
    job_id = job.id
    state = JobState(job.state)
    if state in TERMINAL_JOB_STATES or job.cancel_requested:
        return job
    if state in ACTIVE_JOB_STATES:
        job.cancel_requested = True
        job.serial = serial
        job.updated_at = now
        add_event(session, job, now, "cancel_requested", state, state, reason)
        return job
    change = Transition(job_id, JobState.CANCELLED, reason)
    return apply_transitions(session, [change], now, serial)[0]


def latest_runs(session: Session, jobs: Sequence[Job]) -> dict[str, Run]:
    run_ids = [job.run_id for job in jobs if job.run_id is not None]
    runs: dict[str, Run] = {}
    for part in chunks(run_ids):
        for run in session.scalars(select(Run).where(Run.id.in_(part))):
            runs[run.id] = run
    return runs


def set_priority(session: Session, job_id: str, priority: int, reason: str, now: datetime) -> Job:
    """Change a waiting job's priority. Only a queued or preempted job: the priority of a job
    that holds resources already did its work, and changing it would rewrite history."""
    serial = reserve_serials(session, 1)
    job = lock_jobs(session, [job_id])[job_id]
    state = JobState(job.state)
    if state not in WAITING_JOB_STATES:
        raise ConflictError(
            f"job {job_id} is {state}: only a waiting job (queued or preempted) can be "
            "reprioritized"
        )
    old = job.priority
    job.priority = priority
    if job.spec.get("priority_class") is None:
        # Keep the stored spec telling the same story as the column the JobDb orders by.
        job.spec = {**job.spec, "priority": priority}
    job.serial = serial
    job.updated_at = now
    note = f"priority {old} → {priority}" + (f": {reason}" if reason else "")
    add_event(session, job, now, "reprioritized", state, state, note)
    return job


def queue_position(session: Session, job_id: str) -> int | None:
    """1-based place of a queued job in its queue's order (−priority, submission); None when
    the job is not queued."""
    job = session.get(Job, job_id)
    if job is None:
        raise NotFoundError(f"no such job: {job_id}")
    if job.state != JobState.QUEUED.value:
        return None
    ahead = session.execute(
        select(func.count())
        .select_from(Job)
        .where(
            Job.queue == job.queue,
            Job.state == JobState.QUEUED.value,
            or_(
                Job.priority > job.priority,
                and_(Job.priority == job.priority, Job.submit_serial < job.submit_serial),
            ),
        )
    ).scalar_one()
    return int(ahead) + 1


def job_counts(session: Session) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for queue, state, count in session.execute(
        select(Job.queue, Job.state, func.count()).group_by(Job.queue, Job.state)
    ):
        counts.setdefault(queue, {})[state] = int(count)
    return counts
