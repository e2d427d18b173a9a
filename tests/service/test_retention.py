"""Finished jobs leave the scheduler's memory after the retention; the store keeps them."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from flotilla.backends.sim import SimBackend
from flotilla.model import JobSpec, QueueSpec
from flotilla.service.allocator import AllocatorTrim
from flotilla.service.loop import SchedulingLoop
from flotilla.service.retention import FinishedJobs
from flotilla.store import JobState, SqlStore
from tests.service_builders import loop_over


class Clock:
    """Wall time, moved forward by the test."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def jobs(n: int, queue: str = "default", duration: float = 0.0) -> list[JobSpec]:
    return [
        JobSpec.model_validate(
            {
                "name": f"job-{index}",
                "queue": queue,
                "tasks": [{"name": "main", "resources": {"cpu": 1}}],
                "payload": {"sim": {"duration": duration}},
            }
        )
        for index in range(n)
    ]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    store.put_queue(QueueSpec(name="default"))
    yield store
    store.close()


def finish(store: SqlStore, job_ids: list[str], state: JobState = JobState.CANCELLED) -> None:
    for job_id in job_ids:
        store.cancel(job_id, "done with it")
    assert all(store.get_job(job_id).state is state for job_id in job_ids)


def test_a_finished_job_leaves_the_jobdb_after_the_retention_and_stays_in_the_store(
    store: SqlStore,
) -> None:
    clock = Clock()
    finished = FinishedJobs(retention=60.0, clock=clock)
    jobdb = finished.load(store)
    done, waiting = store.submit_jobs(jobs(2))
    finish(store, [done])
    finished.observe(jobdb.sync_changes(store, keep=finished.keep))
    clock.now = store.get_job(done).updated_at.timestamp() + 59.0
    assert finished.sweep() == 0 and jobdb.read_txn().get(done) is not None

    clock.now += 2.0
    assert finished.sweep() == 1
    assert jobdb.read_txn().get(done) is None
    assert jobdb.read_txn().get(waiting) is not None  # a queued job is never dropped
    assert store.get_job(done).state is JobState.CANCELLED  # the history stays


def test_a_restart_does_not_load_jobs_that_ended_longer_than_the_retention_ago(
    store: SqlStore,
) -> None:
    ids = store.submit_jobs(jobs(5))
    finish(store, ids[:3])
    clock = Clock()
    clock.now = store.get_job(ids[2]).updated_at.timestamp() + 3_600.0
    jobdb = FinishedJobs(retention=60.0, clock=clock).load(store)
    read = jobdb.read_txn()
    assert sorted(job.id for job in read) == sorted(ids[3:])
    assert read.serial == store.latest_serial()  # the serial moved past what was left out


def test_a_job_changed_after_it_ended_is_not_dropped_for_its_old_version(
    store: SqlStore,
) -> None:
    """The sweep drops the version it saw end; a newer one (kept by a sync) stays."""
    clock = Clock()
    finished = FinishedJobs(retention=10.0, clock=clock)
    jobdb = finished.load(store)
    (job,) = store.submit_jobs(jobs(1))
    finish(store, [job])
    finished.observe(jobdb.sync_changes(store, keep=finished.keep))
    ended = jobdb.read_txn().get(job)
    assert ended is not None
    with jobdb.write_txn() as txn:  # a later version of the job, as a sync would bring
        txn.upsert([replace(ended, serial=ended.serial + 1000)])
    clock.now = ended.updated_at.timestamp() + 11.0
    assert finished.sweep() == 0
    assert jobdb.read_txn().get(job) is not None


def test_a_negative_retention_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="retention: must be >= 0"):
        FinishedJobs(retention=-1.0)


@pytest.fixture
def sim_loop(store: SqlStore) -> Iterator[SchedulingLoop]:
    """A loop over a small sim cluster that drops finished jobs at once (retention 0)."""
    backend = SimBackend(cluster="sim", nodes=[{"name": "n", "count": 4, "resources": {"cpu": 8}}])
    loop = loop_over(
        store, {"sim": backend}, cycle_interval=0.05, replica="retention", finished_retention=0.0
    )
    try:
        yield loop
    finally:
        loop.close()
        backend.close()


def test_the_loop_forgets_jobs_it_ran_to_the_end_but_keeps_running_ones(
    store: SqlStore, sim_loop: SchedulingLoop
) -> None:
    loop = sim_loop
    short = store.submit_jobs(jobs(6, duration=0.0))
    long = store.submit_jobs(
        [spec.model_copy(update={"name": f"long-{spec.name}"}) for spec in jobs(2, duration=600)]
    )
    for _ in range(50):
        loop.cycle()
        if all(store.get_job(job).state is JobState.SUCCEEDED for job in short):
            break
    loop.cycle()
    read = loop.jobdb.read_txn()
    assert [job for job in short if job in read] == []
    assert all(store.get_job(job).state is JobState.SUCCEEDED for job in short)
    assert {read.get(job).state for job in long if read.get(job)} == {JobState.RUNNING}
    assert len(read) == 2


def test_no_finished_job_stays_in_the_loops_memory_once_it_left_the_jobdb(
    store: SqlStore, sim_loop: SchedulingLoop
) -> None:
    """Memory follows the live jobs: once the retention dropped a finished job, nothing the
    loop keeps (snapshot builder, engine jobs, caches, backend) still holds its spec."""
    loop = sim_loop
    ids = store.submit_jobs(jobs(20, duration=0.0))
    loop.cycle()
    read = loop.jobdb.read_txn()
    specs = [weakref.ref(record.spec) for record in (read.get(job) for job in ids) if record]
    assert len(specs) == len(ids)
    del read
    for _ in range(50):
        loop.cycle()
        if not len(loop.jobdb.read_txn()):
            break
    loop.cycle()
    assert all(store.get_job(job).state is JobState.SUCCEEDED for job in ids)
    gc.collect()
    assert [ref for ref in specs if ref() is not None] == []


def test_free_memory_is_given_back_after_jobs_left_at_most_once_per_interval() -> None:
    trims: list[int] = []
    clock = Clock()
    allocator = AllocatorTrim(lambda pad: trims.append(pad) or 1, every=30.0, clock=clock)
    clock.now += 60.0
    assert not allocator.trim_if_due()  # nothing was dropped: nothing to give back
    allocator.note_dropped(100)
    assert allocator.trim_if_due() and trims == [0]
    allocator.note_dropped(100)
    clock.now += 10.0
    assert not allocator.trim_if_due()  # too soon
    clock.now += 25.0
    assert allocator.trim_if_due() and len(trims) == 2
    assert not AllocatorTrim(None).trim_if_due()  # not glibc: nothing to call
