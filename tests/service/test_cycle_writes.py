"""The loop's writes (``service/writes.py``): what a cycle gathers is one transaction with its
leases, the JobDb follows from the change feed read in it, and a write that fails loses
nothing it can still make."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from flotilla.backends.sim import SimBackend
from flotilla.jobdb import JobDb
from flotilla.model import JobSpec, QueueSpec
from flotilla.service.context import LoopContext
from flotilla.service.metrics import SchedulerMetrics
from flotilla.service.writes import CycleWrites
from flotilla.store import (
    CycleCommit,
    CycleWrite,
    JobRecord,
    JobState,
    RunRequest,
    SqlStore,
    Transition,
)
from tests.service_builders import loop_over


class Recorder:
    """The store's ``commit_cycle`` with every write it was given (and, once, a failure)."""

    def __init__(self, store: SqlStore) -> None:
        self.original = store.commit_cycle
        self.writes: list[CycleWrite] = []
        self.fail_next = False

    def __call__(self, write: CycleWrite, **kwargs: Any) -> CycleCommit:
        if write:
            self.writes.append(write)
        if self.fail_next and write:
            self.fail_next = False
            raise OperationalError("commit", {}, Exception("the database went away"))
        return self.original(write, **kwargs)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    store.put_queue(QueueSpec(name="default"))
    yield store
    store.close()


@pytest.fixture
def recorder(store: SqlStore, monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder(store)
    monkeypatch.setattr(store, "commit_cycle", recorder)
    return recorder


def submit(store: SqlStore, count: int, cpu: float = 0.0, prefix: str = "j") -> list[str]:
    specs = [
        JobSpec.model_validate(
            {
                "name": f"{prefix}{index}",
                "queue": "default",
                "tasks": [{"name": "t", "resources": {"cpu": cpu} if cpu else {}}],
                "payload": {"sim": {"duration": 3600}},
            }
        )
        for index in range(count)
    ]
    return store.submit_jobs(specs)


def writes_for(store: SqlStore) -> tuple[CycleWrites, JobDb, list[JobRecord]]:
    jobdb = JobDb.load(store)
    context = LoopContext(store, {}, jobdb, SchedulerMetrics())
    context.lease = store.try_acquire_lease("scheduler", "me", 60)
    fed: list[JobRecord] = []

    def absorb(since: int, records: list[JobRecord]) -> None:
        fed.extend(jobdb.apply_feed(since, records))

    return CycleWrites(context, absorb), jobdb, fed


def test_gathered_transitions_are_written_with_the_leases_in_one_transaction(
    store: SqlStore, recorder: Recorder
) -> None:
    dispatched, reported, waiting = submit(store, 3)
    store.record_runs([RunRequest(dispatched, "c1"), RunRequest(reported, "c1")])
    writes, jobdb, fed = writes_for(store)
    writes.add([Transition(dispatched, JobState.PENDING, "dispatched")])
    writes.add([Transition(reported, JobState.PENDING, "dispatched")])
    writes.add([Transition(reported, JobState.RUNNING, "started")])
    assert recorder.writes == []  # nothing written before the flush

    recorded = writes.flush([RunRequest(waiting, "c1")])

    assert recorded == [RunRequest(waiting, "c1")]
    assert len(recorder.writes) == 1
    states = {
        job_id: jobdb.read_txn().get(job_id).state for job_id in (dispatched, reported, waiting)
    }  # type: ignore[union-attr]
    assert states == {
        dispatched: JobState.PENDING,
        reported: JobState.RUNNING,
        waiting: JobState.LEASED,
    }
    assert jobdb.serial == store.latest_serial()
    assert {record.id for record in fed} == {dispatched, reported, waiting}


def test_a_write_the_database_refused_is_made_by_the_next_flush(
    store: SqlStore, recorder: Recorder
) -> None:
    """A backend reports a run's end once: losing the report would leave the job running."""
    [job_id] = submit(store, 1)
    store.record_runs([RunRequest(job_id, "c1")])
    writes, jobdb, _ = writes_for(store)
    writes.add([Transition(job_id, JobState.SUCCEEDED, "exited 0")])
    recorder.fail_next = True
    with pytest.raises(OperationalError):
        writes.flush()
    assert store.get_job(job_id).state is JobState.LEASED and writes.waiting
    writes.flush()
    assert store.get_job(job_id).state is JobState.SUCCEEDED
    assert jobdb.read_txn().get(job_id).state is JobState.SUCCEEDED  # type: ignore[union-attr]


def test_a_write_that_no_longer_applies_whole_is_written_in_parts(
    store: SqlStore, recorder: Recorder
) -> None:
    running, stale, cancelled, queued = submit(store, 4)
    old = store.record_run(stale, "c1", {})
    store.transition(stale, JobState.QUEUED, "returned")
    store.record_runs([RunRequest(running, "c1"), RunRequest(stale, "c1")])
    writes, jobdb, _ = writes_for(store)
    store.cancel(cancelled, "changed my mind")  # after the JobDb was read
    writes.add([Transition(running, JobState.RUNNING, "started")])
    writes.add([Transition(stale, JobState.SUCCEEDED, "a late report", run=old.id)])

    recorded = writes.flush([RunRequest(cancelled, "c1"), RunRequest(queued, "c1")])

    assert recorded == [RunRequest(queued, "c1")]
    assert store.get_job(running).state is JobState.RUNNING
    assert store.get_job(stale).state is JobState.LEASED  # the old run's report was ignored
    assert store.get_job(cancelled).state is JobState.CANCELLED
    assert store.get_job(queued).state is JobState.LEASED
    assert jobdb.serial == store.latest_serial() and not writes.waiting


def test_reports_that_runs_started_wait_for_the_leases_and_ends_do_not(store: SqlStore) -> None:
    writes, _, _ = writes_for(store)
    writes.add([Transition("a", JobState.PENDING, "dispatched")])
    writes.add([Transition("a", JobState.RUNNING, "started")])
    assert writes.waiting and not writes.settling
    writes.add([Transition("b", JobState.SUCCEEDED, "exited 0")])
    assert writes.settling


def test_a_cycle_writes_its_leases_with_the_last_cycles_dispatches_in_one_transaction(
    store: SqlStore, recorder: Recorder
) -> None:
    backend = SimBackend(
        cluster="sim",
        nodes=[{"name": "n", "count": 4, "resources": {"cpu": 8}}],
        default_duration=3600.0,
    )
    loop = loop_over(store, {"sim": backend}, replica="test")
    try:
        first = submit(store, 4, cpu=1)
        loop.cycle()  # leases and dispatches the first batch
        assert {store.get_job(job_id).state for job_id in first} == {JobState.LEASED}
        second = submit(store, 4, cpu=1, prefix="second")
        recorder.writes.clear()

        loop.cycle()

        [write] = recorder.writes
        assert {change.job_id for change in write.transitions} == set(first)
        assert {change.new_state for change in write.transitions} <= {
            JobState.PENDING,
            JobState.RUNNING,
        }
        assert {request.job_id for request in write.runs} == set(second)
        assert {store.get_job(job_id).state for job_id in first} <= {
            JobState.PENDING,
            JobState.RUNNING,
        }
        assert {store.get_job(job_id).state for job_id in second} == {JobState.LEASED}
    finally:
        loop.close()
        backend.close()


def test_with_cycles_far_apart_a_cycle_writes_its_dispatches_at_its_end(store: SqlStore) -> None:
    """With ``--cycle-interval 30`` a job that started must not read ``leased`` for 30 s."""
    backend = SimBackend(
        cluster="sim",
        nodes=[{"name": "n", "count": 4, "resources": {"cpu": 8}}],
        default_duration=3600.0,
    )
    loop = loop_over(store, {"sim": backend}, replica="t", cycle_interval=30)
    try:
        jobs = submit(store, 4, cpu=1)
        loop.cycle()
        assert {store.get_job(job_id).state for job_id in jobs} <= {
            JobState.PENDING,
            JobState.RUNNING,
        }
    finally:
        loop.close()
        backend.close()
