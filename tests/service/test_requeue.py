"""Requeue (Slurm's ``scontrol requeue``) through the real loop, store (SQLite) and local
processes: a running job's process is stopped and the job runs again as a new attempt; a job
that ended cannot be requeued, a waiting one is left as it is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.lifecycle.machine import REQUEUED_AFTER_STOP
from flotilla.store import ConflictError, JobState, RunState
from tests.service.test_service_loop import Service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    running = Service(tmp_path)
    yield running
    running.close()


def test_a_running_job_requeued_is_stopped_and_runs_again_as_a_new_attempt(
    service: Service, tmp_path: Path
) -> None:
    marker = tmp_path / "first-ran"
    job = service.submit(
        "twice", f"if [ -e {marker} ]; then echo second; else touch {marker}; sleep 600; fi"
    )
    service.cycle_until(lambda: marker.exists() and service.state(job) is JobState.RUNNING)
    [record] = service.store.requeue_many([job], "requeue requested by alice")
    assert record.state is JobState.PREEMPTED
    service.cycle_until(lambda: service.state(job) is JobState.SUCCEEDED)
    runs = service.store.runs(job)
    assert [run.attempt for run in runs] == [1, 2]
    assert runs[0].state is RunState.PREEMPTED
    moves = [(e.to_state, e.reason) for e in service.store.events(job) if e.to_state]
    assert (JobState.PREEMPTED, "requeue requested by alice") in moves
    assert (JobState.QUEUED, f"{REQUEUED_AFTER_STOP}: requeue requested by alice") in moves


def test_a_job_that_ended_cannot_be_requeued_and_a_queued_one_is_left_as_it_is(
    service: Service,
) -> None:
    done = service.submit("done", "exit 3")
    service.cycle_until(lambda: service.state(done) is JobState.FAILED)
    with pytest.raises(ConflictError, match="is failed: it has ended"):
        service.store.requeue_many([done], "requeue requested by alice")
    waiting = service.submit("waiting", "true")
    [record] = service.store.requeue_many([waiting], "requeue requested by alice")
    assert record.state is JobState.QUEUED
    assert [e.to_state for e in service.store.events(waiting) if e.to_state] == [JobState.QUEUED]
