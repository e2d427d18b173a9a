"""Commit observers: told what each committed write did to jobs, never about a failed one.
They feed the job counters of /metrics, so every submission and transition is counted."""

from __future__ import annotations

import pytest
from store_support import job

from flotilla.store import CommittedChanges, DuplicateJobError, JobState, SqlStore


class Recorder:
    def __init__(self) -> None:
        self.seen: list[CommittedChanges] = []

    def committed(self, changes: CommittedChanges) -> None:
        self.seen.append(changes)


def test_observers_hear_submissions_and_every_state_change_once_committed(
    store: SqlStore,
) -> None:
    recorder = Recorder()
    store.add_observer(recorder)
    queued, running = store.submit_jobs([job("a"), job("b", "team-b")])
    assert recorder.seen[-1] == CommittedChanges(
        submitted={"team-a": 1, "team-b": 1}, transitions={("none", "queued"): 2}
    )
    store.record_run(running, "c1", {})
    assert recorder.seen[-1].transitions == {("queued", "leased"): 1}
    store.transition(running, JobState.RUNNING, "started")
    assert recorder.seen[-1].transitions == {("leased", "running"): 1}
    store.cancel_many([queued, running], "stop")  # one now, one only requested
    assert recorder.seen[-1].transitions == {("queued", "cancelled"): 1}
    assert len(recorder.seen) == 4


def test_a_failed_write_tells_nobody(store: SqlStore) -> None:
    store.submit_jobs([job("a")])
    recorder = Recorder()
    store.add_observer(recorder)
    with pytest.raises(DuplicateJobError):
        store.submit_jobs([job("b"), job("b")])
    store.set_priority(store.list_jobs().jobs[0].id, 3)  # no state change
    assert recorder.seen == []


def test_a_failing_observer_does_not_fail_the_write(store: SqlStore) -> None:
    class Broken:
        def committed(self, changes: CommittedChanges) -> None:
            raise RuntimeError("observer bug")

    store.add_observer(Broken())
    (job_id,) = store.submit_jobs([job("a")])
    assert store.get_job(job_id).state is JobState.QUEUED
