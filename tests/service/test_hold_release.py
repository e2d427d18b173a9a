"""Hold and release (Slurm's ``scontrol hold``/``release``) through the real loop, store
(SQLite) and local processes: a held job is never started however many cycles pass, and
released it runs; only a queued job can be held, only a held one released."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.store import ConflictError, JobState
from tests.service.test_service_loop import Service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    running = Service(tmp_path)
    yield running
    running.close()


def test_a_held_job_never_starts_until_released_then_runs(service: Service) -> None:
    held = service.submit("held", "echo ran")
    other = service.submit("other", "echo other")
    [record] = service.store.hold_many([held], "waiting for the data")
    assert record.state is JobState.HELD and record.reason == "waiting for the data"
    service.cycle_until(lambda: service.state(other) is JobState.SUCCEEDED)
    for _ in range(3):  # more cycles with room to spare: still held, no run
        service.loop.cycle()
    assert service.state(held) is JobState.HELD
    assert service.store.runs(held) == []
    [released] = service.store.release_many([held], "data is in")
    assert released.state is JobState.QUEUED
    service.cycle_until(lambda: service.state(held) is JobState.SUCCEEDED)
    moves = [(e.from_state, e.to_state) for e in service.store.events(held) if e.to_state]
    assert moves[:3] == [
        (None, JobState.QUEUED),
        (JobState.QUEUED, JobState.HELD),
        (JobState.HELD, JobState.QUEUED),
    ]


def test_only_a_queued_job_is_held_and_only_a_held_one_released(service: Service) -> None:
    done = service.submit("done", "true")
    service.cycle_until(lambda: service.state(done) is JobState.SUCCEEDED)
    with pytest.raises(ConflictError, match="is succeeded: only a queued job can be held"):
        service.store.hold_many([done], "")
    with pytest.raises(ConflictError, match="only a held job can be released"):
        service.store.release_many([done], "")
    waiting = service.submit("waiting", "true")
    service.store.hold_many([waiting], "once")
    again = service.store.hold_many([waiting], "twice")  # idempotent
    assert again[0].state is JobState.HELD
    assert [e.reason for e in service.store.events(waiting) if e.to_state is JobState.HELD] == [
        "once"
    ]


def test_a_held_job_can_be_cancelled(service: Service) -> None:
    job = service.submit("job", "true")
    service.store.hold_many([job], "")
    assert service.store.cancel(job, "not needed").state is JobState.CANCELLED
