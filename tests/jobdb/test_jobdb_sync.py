"""JobDb sync from the store: incremental syncs end where a full reload does."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flotilla.jobdb import JobDb, ReadTxn
from flotilla.model import JobSpec, QueueSpec
from flotilla.store import JOB_TRANSITIONS, JobState, SqlStore


def spec(name: str, queue: str, priority: int) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": name,
            "queue": queue,
            "priority": priority,
            "tasks": [{"name": "t", "resources": {}}],
        }
    )


def open_store(directory: str) -> SqlStore:
    store = SqlStore.open(f"sqlite:///{directory}/flotilla.db")
    for queue in ("team-a", "team-b"):
        store.put_queue(QueueSpec(name=queue))
    return store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    store = open_store(str(tmp_path))
    yield store
    store.close()


def view(snapshot: ReadTxn) -> dict[str, object]:
    """Everything a reader can observe, for comparing two JobDbs."""
    return {
        "jobs": {job.id: job for job in snapshot},
        "order": {
            queue: [job.id for job in snapshot.jobs_in_queue(queue, tuple(JobState))]
            for queue in snapshot.queues()
        },
        "states": {state: set(snapshot.ids_in_state(state)) for state in JobState},
        "serial": snapshot.serial,
    }


def test_sync_applies_only_what_changed_and_old_snapshots_stay(store: SqlStore) -> None:
    ids = store.submit_jobs([spec(f"j{index}", "team-a", index % 3) for index in range(5)])
    db = JobDb.load(store, page=2)
    loaded = db.read_txn()
    assert len(loaded) == 5 and loaded.serial == store.latest_serial()
    store.record_run(ids[0], "c1", {})
    store.cancel(ids[1], "x")
    assert db.sync(store) == 2
    assert db.sync(store) == 0
    now = db.read_txn()
    assert now.get(ids[0]).state is JobState.LEASED  # type: ignore[union-attr]
    assert loaded.get(ids[0]).state is JobState.QUEUED  # type: ignore[union-attr]
    assert [job.id for job in now.jobs_in_queue("team-a")] == [ids[2], ids[4], ids[3]]


Operation = tuple[str, int, int]

operations = st.lists(
    st.tuples(
        st.sampled_from(["submit", "advance", "cancel", "sync"]),
        st.integers(min_value=0, max_value=30),
        st.integers(min_value=0, max_value=6),
    ),
    min_size=1,
    max_size=25,
)


def apply(store: SqlStore, operation: Operation, names: list[str], ids: list[str]) -> None:
    kind, pick, number = operation
    if kind == "submit":
        batch = []
        for _ in range(number % 3 + 1):
            names.append(f"j{len(names)}")
            batch.append(spec(names[-1], ("team-a", "team-b")[pick % 2], number))
        ids.extend(store.submit_jobs(batch))
    elif ids and kind == "cancel":
        store.cancel(ids[pick % len(ids)], "property test")
    elif ids and kind == "advance":
        job = store.get_job(ids[pick % len(ids)])
        if job.state is JobState.QUEUED:
            store.record_run(job.id, "c1", {})
            return
        targets = sorted(JOB_TRANSITIONS[job.state] - {JobState.LEASED})
        if targets:
            store.transition(job.id, targets[number % len(targets)], "property test")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_incremental_syncs_equal_a_full_reload(steps: list[Operation]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = open_store(directory)
        db = JobDb()
        names: list[str] = []
        ids: list[str] = []
        for step in steps:
            if step[0] == "sync":
                db.sync(store, page=1 + step[2])
            else:
                apply(store, step, names, ids)
        db.sync(store, page=3)
        assert view(db.read_txn()) == view(JobDb.load(store).read_txn())
        store.close()


def test_the_change_feed_returns_what_each_sync_applied(store: SqlStore) -> None:
    db = JobDb()
    first = store.submit_jobs([spec("a", "team-a", 0), spec("b", "team-b", 0)])
    assert [job.id for job in db.sync_changes(store)] == first
    store.cancel(first[0], "gone")
    changed = db.sync_changes(store)
    assert [(job.id, job.state) for job in changed] == [(first[0], JobState.CANCELLED)]
    assert db.sync_changes(store) == []


def test_counts_by_queue_come_from_the_queue_indexes(store: SqlStore) -> None:
    ids = store.submit_jobs([spec(f"j{index}", "team-a", 0) for index in range(3)])
    store.submit_jobs([spec("k", "team-b", 0)])
    store.cancel(ids[0], "gone")
    read = JobDb.load(store).read_txn()
    assert read.count_by_queue((JobState.QUEUED,)) == {"team-a": 2, "team-b": 1}
    assert read.count_by_queue((JobState.CANCELLED, JobState.RUNNING)) == {"team-a": 1}
