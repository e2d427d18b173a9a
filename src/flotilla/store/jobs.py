"""Job writes inside one session: submission and reprioritization (a scheduler's
state changes and leases are ``cycle.py``, and cancels ``cancels.py``, which build on it).

Every function here runs inside the caller's transaction and takes its serials from
``reserve_serials`` before anything else: the counter row lock then orders all job writers
(see ``schema.Serial``), and as nobody waits for another lock while holding it, writers cannot
deadlock.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast

from sqlalchemy import Table, and_, func, or_, select, update
from sqlalchemy.orm import Session

from flotilla.model import JobSpec
from flotilla.store.bulk import CHUNK, among, batches, insert_rows
from flotilla.store.convert import paced
from flotilla.store.dependencies import resolve as resolve_dependencies
from flotilla.store.errors import (
    ConflictError,
    DuplicateJobError,
    InvalidJobError,
    NotFoundError,
)
from flotilla.store.observe import tally_events, tally_submitted
from flotilla.store.schema import Event, Job, Queue, Run, Serial
from flotilla.store.states import (
    WAITING_JOB_STATES,
    JobState,
)

JOBS = cast(Table, Job.__table__)
RUNS = cast(Table, Run.__table__)
EVENTS = cast(Table, Event.__table__)

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


def expand(batch: Sequence[JobSpec]) -> list[tuple[JobSpec, str | None, int | None]]:
    """A spec with ``count`` N is N jobs, one with ``array`` N elements of a new array (each
    keeps the ``array`` settings); each stored spec names one job. Returns each job's spec,
    array id and index."""
    jobs: list[tuple[JobSpec, str | None, int | None]] = []
    for spec in batch:
        if spec.array is not None:
            array_id = new_id()
            jobs.extend(
                (spec.model_copy(update={"name": name}), array_id, index)
                for index, name in enumerate(spec.job_names())
            )
        elif spec.count is None:
            jobs.append((spec, None, None))
        else:
            jobs.extend(
                (spec.model_copy(update={"name": name, "count": None}), None, None)
                for name in spec.job_names()
            )
    return jobs


def check_batch(session: Session, jobs: Sequence[JobSpec]) -> None:
    """Every queue exists; no name is used twice in the batch (a dependency on a name of the
    batch must mean one job). A name of a stored job, finished or not, may be used again, as
    ``sbatch job.sh`` three times gives three jobs (issue 37): references by name then mean
    the newest job of that name."""
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


def submit(
    session: Session,
    batch: Sequence[JobSpec],
    owner: str | None,
    now: datetime,
    pace: Callable[[], None] | None = None,
) -> list[str]:
    expanded = expand(batch)
    if not expanded:
        return []
    jobs = [job for job, _, _ in expanded]
    ids = [new_id() for _ in jobs]
    # The rows are made before the serial counter is locked (its serials and dependencies
    # filled in after): every other writer waits for that lock until this one commits. So
    # this is where a large batch paces itself (``pace``), holding no lock.
    rows: list[dict[str, Any]] = [
        {
            "id": job_id,
            "name": job.name,
            "queue": job.queue,
            "spec": job.model_dump(mode="json"),
            "state": JobState.QUEUED.value,
            "priority": job.priority or 0,
            "submitted_at": now,
            "updated_at": now,
            "submit_serial": 0,
            "serial": 0,
            "labels": dict(job.labels),
            "owner": owner if owner is not None else job.user,
            "cancel_requested": False,
            "reason": "submitted",
            "run_id": None,
            "dependencies": None,
            "not_before": None,
            "array_id": array_id,
            "array_index": array_index,
        }
        for job_id, (job, array_id, array_index) in paced(zip(ids, expanded, strict=True), pace)
    ]
    events: list[dict[str, Any]] = [
        {
            "job_id": job_id,
            "run_id": None,
            "time": now,
            "kind": "submitted",
            "from_state": None,
            "to_state": JobState.QUEUED.value,
            "reason": "submitted",
        }
        for job_id in ids
    ]
    # The serials first: their row lock orders concurrent submissions (the newest job of a
    # name is the one with the highest serial).
    first = reserve_serials(session, len(jobs))
    check_batch(session, jobs)
    origins = [index for index, spec in enumerate(batch) for _ in spec.job_names()]
    paths = [f"jobs[{index}]." if len(batch) > 1 else "" for index in origins]
    dependencies = resolve_dependencies(session, jobs, ids, paths)
    for offset, row in enumerate(rows):
        row["submit_serial"] = row["serial"] = first + offset
        row["dependencies"] = dependencies[offset]
    insert_rows(session, JOBS, rows)
    insert_events(session, events)
    tally_submitted(session, [job.queue for job in jobs])
    return ids


LOCK_COLUMNS = (JOBS.c.id, JOBS.c.state, JOBS.c.run_id, JOBS.c.cancel_requested)
"""What the state machine reads of a job: locking the whole row decoded the spec and labels
JSON of every job of a batch, and no write needs them."""


def lock_jobs(session: Session, job_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Lock (on PostgreSQL ``FOR UPDATE``, in id order so lockers cannot deadlock) and read
    the jobs' state columns as plain dicts the caller updates as it goes; raises
    ``NotFoundError`` for unknown ids."""
    wanted = sorted(set(job_ids))
    found: dict[str, dict[str, Any]] = {}
    for part in batches(session, wanted):
        for row in session.execute(
            select(*LOCK_COLUMNS)
            .where(among(session, JOBS.c.id, part))
            .order_by(JOBS.c.id)
            .with_for_update()
        ):
            found[row.id] = dict(row._mapping)
    missing = [job_id for job_id in wanted if job_id not in found]
    if missing:
        raise NotFoundError(f"no such job(s): {', '.join(missing[:5])}")
    return found


def event_row(
    job: Job | Mapping[str, Any],
    now: datetime,
    kind: str,
    old: JobState | None,
    new: JobState | None,
    reason: str,
) -> dict[str, Any]:
    """An event as a row for ``insert_events``."""
    job_id, run_id = (job.id, job.run_id) if isinstance(job, Job) else (job["id"], job["run_id"])
    return {
        "job_id": job_id,
        "run_id": run_id,
        "time": now,
        "kind": kind,
        "from_state": None if old is None else old.value,
        "to_state": None if new is None else new.value,
        "reason": reason,
    }


def insert_events(session: Session, events: Sequence[dict[str, Any]]) -> None:
    """Insert a batch's events in one statement per chunk: as ORM objects, thousands of events
    cost a large part of a dispatch batch (identity map, unit of work; ``docs/performance.md``),
    and nothing reads them back in the same transaction. The state changes among them are
    tallied for the commit observers (``observe.py``)."""
    tally_events(session, events)
    insert_rows(session, EVENTS, events)


def set_priority(session: Session, job_id: str, priority: int, reason: str, now: datetime) -> Job:
    """Change a waiting job's priority. Only a queued or preempted job: the priority of a job
    that holds resources already did its work, and changing it would rewrite history."""
    serial = reserve_serials(session, 1)
    job = session.get(Job, job_id, with_for_update=True)
    if job is None:
        raise NotFoundError(f"no such job: {job_id}")
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
    insert_events(session, [event_row(job, now, "reprioritized", state, state, note)])
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
