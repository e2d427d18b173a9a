"""The snapshot builder keeps the queued backlog's engine jobs from the JobDb's change feed:
whatever the sequence of changes, a snapshot holds exactly the jobs a full rebuild would."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.jobdb import JobDb
from flotilla.model import ClusterSpec, JobSpec, QueueSpec
from flotilla.service.snapshots import SnapshotBuilder
from flotilla.store import JobState, RunRequest, SqlStore, Transition


def spec(name: str, **resources: float) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": name,
            "queue": "default",
            "tasks": [{"name": "main", "resources": resources or {"cpu": 1}}],
        }
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    store.put_queue(QueueSpec(name="default"))
    store.upsert_cluster(
        ClusterSpec.model_validate(
            {"name": "c1", "nodes": [{"name": "n", "count": 2, "resources": {"cpu": 8}}]}
        )
    )
    yield store
    store.close()


def synced(store: SqlStore, jobdb: JobDb, builder: SnapshotBuilder) -> None:
    changed = jobdb.sync_changes(store)
    builder.observe(changed, jobdb.serial)


def queued_names(builder: SnapshotBuilder, jobdb: JobDb) -> set[str]:
    return {job.name for job in builder.build(jobdb.read_txn()).snapshot.queued}


def test_a_snapshot_follows_submissions_cancels_and_leases(store: SqlStore) -> None:
    first = store.submit_jobs([spec("a"), spec("b"), spec("c")])
    jobdb = JobDb.load(store)
    builder = SnapshotBuilder(store, jobdb)
    assert queued_names(builder, jobdb) == set(first)
    later = store.submit_jobs([spec("d")])
    store.cancel(first[0], "not needed")
    synced(store, jobdb, builder)
    builder.prepare(1.0)
    assert queued_names(builder, jobdb) == {first[1], first[2], later[0]}


def test_a_re_queued_job_comes_back_and_a_changed_priority_is_seen(store: SqlStore) -> None:
    (job,) = store.submit_jobs([spec("a")])
    jobdb = JobDb.load(store)
    builder = SnapshotBuilder(store, jobdb)
    builder.build(jobdb.read_txn())
    store.record_runs([RunRequest(job, "c1", {"placements": []}, "scheduled")])
    synced(store, jobdb, builder)
    assert queued_names(builder, jobdb) == set()
    store.transition_many([Transition(job, JobState.PENDING, "dispatched")])
    store.transition_many([Transition(job, JobState.QUEUED, "run lost")])
    store.set_priority(job, 7)
    synced(store, jobdb, builder)
    (queued,) = builder.build(jobdb.read_txn()).snapshot.queued
    assert queued.name == job and queued.priority == 7


def test_a_sync_that_bypassed_the_feed_is_caught_up_from_the_jobdb(store: SqlStore) -> None:
    jobdb = JobDb.load(store)
    builder = SnapshotBuilder(store, jobdb)
    ids = store.submit_jobs([spec("a"), spec("b")])
    jobdb.sync(store)  # not through observe()
    assert queued_names(builder, jobdb) == set(ids)


def test_a_job_asking_for_a_resource_no_cluster_offers_waits_with_a_reason(
    store: SqlStore,
) -> None:
    (job,) = store.submit_jobs([spec("odd", cpu=1, fpga=1)])
    jobdb = JobDb.load(store)
    built = SnapshotBuilder(store, jobdb).build(jobdb.read_txn())
    assert built.snapshot.queued == []
    assert "fpga" in built.reasons[job]


def test_queued_gangs_are_tracked_for_their_timeout(store: SqlStore) -> None:
    gang = JobSpec.model_validate(
        {
            "name": "g",
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 1}}],
            "gang": {"timeout": 60},
        }
    )
    jobdb = JobDb.load(store)
    builder = SnapshotBuilder(store, jobdb)
    (job, _) = store.submit_jobs([gang, spec("plain")])
    synced(store, jobdb, builder)
    assert set(builder.gangs) == {job}
    store.cancel(job, "gone")
    synced(store, jobdb, builder)
    assert builder.gangs == {}
