"""JobDb transactions: snapshots never change, aborts leave no trace, indexes stay ordered."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from flotilla.jobdb import JobDb
from flotilla.model import JobSpec
from flotilla.store import JobRecord, JobState

TIME = datetime(2026, 1, 1, tzinfo=UTC)


def record(
    job_id: str,
    serial: int,
    *,
    queue: str = "team-a",
    state: JobState = JobState.QUEUED,
    priority: int = 0,
) -> JobRecord:
    spec = JobSpec.model_validate(
        {"name": job_id, "queue": queue, "tasks": [{"name": "t", "resources": {}}]}
    )
    return JobRecord(
        id=job_id,
        name=job_id,
        queue=queue,
        spec=spec,
        state=state,
        priority=priority,
        submitted_at=TIME,
        updated_at=TIME,
        submit_serial=serial,
        serial=serial,
        owner=None,
    )


def moved(job: JobRecord, state: JobState, serial: int) -> JobRecord:
    return dataclasses.replace(job, state=state, serial=serial)


def test_a_snapshot_does_not_see_later_commits() -> None:
    db = JobDb()
    with db.write_txn() as txn:
        txn.upsert([record("a", 1)])
    before = db.read_txn()
    with db.write_txn() as txn:
        txn.upsert([moved(record("a", 1), JobState.LEASED, 2), record("b", 3)])
        assert txn.get("a") is not None and txn.get("a").state is JobState.LEASED  # type: ignore[union-attr]
        assert db.read_txn().get("b") is None
    after = db.read_txn()
    assert before.get("a") == record("a", 1) and "b" not in before and len(before) == 1
    assert [job.id for job in before.jobs_in_queue("team-a")] == ["a"]
    assert after.get("b") is not None and after.count(JobState.LEASED) == 1
    assert [job.id for job in after.jobs_in_queue("team-a")] == ["b"]
    assert (before.serial, after.serial) == (1, 3)


def test_abort_and_errors_discard_the_changes() -> None:
    db = JobDb()
    txn = db.write_txn()
    txn.upsert([record("a", 1)])
    txn.abort()
    assert len(db.read_txn()) == 0
    with pytest.raises(ValueError), db.write_txn() as failing:
        failing.upsert([record("b", 2)])
        raise ValueError("scheduling failed")
    assert len(db.read_txn()) == 0 and db.serial == 0
    with db.write_txn() as txn:
        txn.upsert([record("c", 3)])
    assert [job.id for job in db.read_txn()] == ["c"]
    with pytest.raises(RuntimeError):
        txn.upsert([record("d", 4)])


def test_queue_order_is_priority_then_submission_per_state() -> None:
    db = JobDb()
    jobs = [
        record("low-early", 1, priority=1),
        record("high-late", 5, priority=9),
        record("low-late", 4, priority=1),
        record("high-early", 2, priority=9),
        record("other-queue", 3, queue="team-b"),
    ]
    with db.write_txn() as txn:
        txn.upsert(jobs)
        txn.upsert([moved(jobs[2], JobState.RUNNING, 6)])
    view = db.read_txn()
    assert [job.id for job in view.jobs_in_queue("team-a")] == [
        "high-early",
        "high-late",
        "low-early",
    ]
    both = view.jobs_in_queue("team-a", (JobState.QUEUED, JobState.RUNNING))
    assert [job.id for job in both] == ["high-early", "high-late", "low-early", "low-late"]
    assert view.queues() == {"team-a", "team-b"}
    assert {job.id for job in view.jobs_in_state(JobState.RUNNING)} == {"low-late"}


def test_an_older_version_never_replaces_a_newer_one() -> None:
    db = JobDb()
    newer = moved(record("a", 1), JobState.RUNNING, 7)
    with db.write_txn() as txn:
        txn.upsert([newer])
        txn.upsert([record("a", 1)])
    assert db.read_txn().get("a") == newer
    assert db.read_txn().jobs_in_queue("team-a") == []
