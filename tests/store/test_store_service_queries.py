"""Store methods the API needs: batch cancel, reprioritize, label filter, queue position,
counts and schema status. Run against SQLite and PostgreSQL like the rest of the contract."""

from __future__ import annotations

import pytest
from store_support import job

from flotilla.store import (
    ConflictError,
    JobState,
    NotFoundError,
    SqlStore,
)


def test_cancel_many_is_one_transaction_and_unknown_ids_cancel_none(store: SqlStore) -> None:
    queued, active = store.submit_jobs([job("q"), job("a")])
    store.record_run(active, "c1", {})
    before = store.latest_serial()
    with pytest.raises(NotFoundError):
        store.cancel_many([queued, "missing"], "bulk")
    assert store.get_job(queued).state is JobState.QUEUED
    assert store.latest_serial() == before
    records = store.cancel_many([queued, active], "bulk")
    assert [record.state for record in records] == [JobState.CANCELLED, JobState.LEASED]
    assert records[1].cancel_requested
    assert records[0].serial != records[1].serial and min(r.serial for r in records) > before


def test_set_priority_changes_a_waiting_job_with_an_event_and_serial(store: SqlStore) -> None:
    (job_id,) = store.submit_jobs([job("train", priority=1)])
    serial = store.get_job(job_id).serial
    record = store.set_priority(job_id, 9, "deadline")
    assert record.priority == 9 and record.spec.priority == 9
    assert record.serial > serial and record.state is JobState.QUEUED
    last = store.events(job_id)[-1]
    assert last.kind == "reprioritized" and "1 → 9" in last.reason and "deadline" in last.reason
    assert store.jobs_since(serial)[0].priority == 9


def test_set_priority_refuses_a_job_that_is_not_waiting(store: SqlStore) -> None:
    (job_id,) = store.submit_jobs([job("train")])
    store.record_run(job_id, "c1", {})
    before = store.latest_serial()
    with pytest.raises(ConflictError, match="only a waiting job"):
        store.set_priority(job_id, 5)
    assert store.latest_serial() == before and store.get_job(job_id).priority == 0


def test_list_jobs_filters_by_every_given_label(store: SqlStore) -> None:
    ids = store.submit_jobs(
        [
            job("a", labels={"team": "vision", "tier": "gold"}),
            job("b", labels={"team": "vision"}),
            job("c", labels={"team": "nlp", "tier": "gold"}),
        ]
    )
    vision = store.list_jobs(labels={"team": "vision"}).jobs
    assert [record.id for record in vision] == ids[:2]
    both = store.list_jobs(labels={"team": "vision", "tier": "gold"}).jobs
    assert [record.id for record in both] == ids[:1]
    assert store.list_jobs(labels={"team": "nope"}).jobs == []


def test_queue_position_follows_priority_then_submission(store: SqlStore) -> None:
    low, high, later, other = store.submit_jobs(
        [job("low"), job("high", priority=5), job("later"), job("x", queue="team-b")]
    )
    assert [store.queue_position(i) for i in (high, low, later, other)] == [1, 2, 3, 1]
    store.record_run(high, "c1", {})
    assert store.queue_position(high) is None
    assert store.queue_position(later) == 2


def test_job_counts_group_by_queue_and_state(store: SqlStore) -> None:
    a, _b, _c = store.submit_jobs([job("a"), job("b"), job("c", queue="team-b")])
    store.cancel(a, "x")
    assert store.job_counts() == {
        "team-a": {"queued": 1, "cancelled": 1},
        "team-b": {"queued": 1},
    }


def test_schema_status_is_at_head_after_open(store: SqlStore) -> None:
    status = store.schema_status()
    assert status.at_head and status.current is not None
