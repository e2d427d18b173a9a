"""Dependencies in the service's loop: a job waits until the jobs it depends on ended as its
condition asks, then runs; one whose dependency can never be met ends skipped, naming it. Real
store (SQLite), real local processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.model import JobSpec
from flotilla.store import JobState
from tests.service.test_service_loop import Service
from tests.service_builders import loop_over


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    running = Service(tmp_path)
    yield running
    running.close()


def submit(
    service: Service, name: str, command: str, *needs: tuple[str, str], **fields: object
) -> str:
    spec = JobSpec.model_validate(
        {
            **fields,
            "name": name,
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 0.1}}],
            "payload": {"command": ["sh", "-c", command]},
            "depends_on": [{"job": job, "condition": condition} for job, condition in needs],
        }
    )
    return service.store.submit_jobs([spec])[0]


def first_time(service: Service, job_id: str, state: JobState) -> float:
    return min(
        event.time.timestamp() for event in service.store.events(job_id) if event.to_state is state
    )


def test_a_job_waits_for_its_dependency_to_succeed_then_runs(
    service: Service, tmp_path: Path
) -> None:
    # prep runs until the test opens its gate: a fixed sleep ended before a slow loop (a
    # loaded CI machine) had seen it running, and the test waited for a state long gone.
    gate = tmp_path / "gate"
    prep = submit(service, "prep", f"while [ ! -e {gate} ]; do sleep 0.05; done")
    train = submit(service, "train", "echo trained", ("prep", "succeeded"))
    service.cycle_until(lambda: service.state(prep) is JobState.RUNNING)
    assert service.state(train) is JobState.QUEUED
    reason = service.loop.pending_reason(train) or ""
    assert reason.startswith("waits for job default/prep") and "to succeed" in reason
    gate.touch()
    service.cycle_until(lambda: service.state(train) is JobState.SUCCEEDED)
    assert first_time(service, train, JobState.LEASED) >= first_time(
        service, prep, JobState.SUCCEEDED
    )


def test_a_dependency_that_ends_otherwise_skips_its_dependents_naming_it(
    service: Service,
) -> None:
    prep = submit(service, "prep", "exit 1")
    train = submit(service, "train", "echo never", ("prep", "succeeded"))
    report = submit(service, "report", "echo never", ("train", "succeeded"))
    cleanup = submit(service, "cleanup", "echo cleaned", ("prep", "failed"))
    service.cycle_until(lambda: service.state(report) is JobState.SKIPPED)
    assert service.state(train) is JobState.SKIPPED
    assert service.state(prep) is JobState.FAILED and service.store.runs(train) == []
    failed = service.store.get_job(train).reason
    assert failed.startswith("dependency job default/prep") and "ended failed" in failed
    assert "needed it succeeded" in failed
    assert "dependency job default/train" in service.store.get_job(report).reason
    service.cycle_until(lambda: service.state(cleanup) is JobState.SUCCEEDED)


def test_a_held_job_stays_held_across_a_restart_and_a_clean_up_runs_after_a_cancel(
    service: Service,
) -> None:
    """``finished`` is Slurm's ``afterany``: a clean-up job after a training that was
    cancelled runs; ``failed`` (``afternotok``) accepts a cancel too; the old meaning of
    ``finished``, ``finished_not_cancelled``, still fails its waiter naming the dependency."""
    prep = submit(service, "prep", "sleep 600")
    cleanup = submit(service, "cleanup", "echo cleaned", ("prep", "finished"))
    on_failure = submit(service, "on-failure", "echo alerted", ("prep", "failed"))
    strict = submit(service, "strict", "echo never", ("prep", "finished_not_cancelled"))
    service.cycle_until(lambda: service.state(prep) is JobState.RUNNING)
    service.loop.close()
    service.loop = loop_over(
        service.store, {"local": service.backend}, cycle_interval=0.05, replica="replica-b"
    )
    for _ in range(3):
        service.loop.cycle()
    assert service.state(cleanup) is JobState.QUEUED
    assert "to finish (it is running)" in (service.loop.pending_reason(cleanup) or "")
    service.store.cancel(prep, "not needed")
    service.cycle_until(lambda: service.state(strict) is JobState.SKIPPED)
    assert "ended cancelled" in service.store.get_job(strict).reason
    service.cycle_until(lambda: service.state(cleanup) is JobState.SUCCEEDED)
    service.cycle_until(lambda: service.state(on_failure) is JobState.SUCCEEDED)
    assert service.state(prep) is JobState.CANCELLED


def test_a_gangs_timeout_counts_from_when_its_dependencies_ended(service: Service) -> None:
    prep = submit(service, "prep", "sleep 2")
    gang = submit(service, "gang", "echo placed", ("prep", "succeeded"), gang={"timeout": 1})
    service.cycle_until(lambda: service.state(prep) is JobState.SUCCEEDED)
    service.cycle_until(lambda: service.state(gang) is JobState.SUCCEEDED)


@pytest.mark.parametrize("restart", [False, True], ids=["retention", "restart"])
def test_a_dependency_that_ended_long_ago_still_counts(service: Service, restart: bool) -> None:
    """The scheduler forgets finished jobs after a retention (and does not load them at a
    restart); a job submitted later that depends on one must still see how it ended."""
    prep = submit(service, "prep", "true")
    failed = submit(service, "broken", "exit 3")
    service.cycle_until(lambda: service.state(prep) is JobState.SUCCEEDED)
    service.cycle_until(lambda: service.state(failed) is JobState.FAILED)
    service.loop.close()
    service.loop = loop_over(
        service.store, {"local": service.backend}, cycle_interval=0.05, finished_retention=0.0
    )
    if not restart:  # the same loop forgets them once they are past the retention
        service.loop.cycle()
    train = submit(service, "train", "echo trained", ("prep", "succeeded"))
    never = submit(service, "never", "echo never", ("broken", "succeeded"))
    service.cycle_until(lambda: service.state(train) is JobState.SUCCEEDED)
    service.cycle_until(lambda: service.state(never) is JobState.SKIPPED)
    assert "dependency job default/broken" in service.store.get_job(never).reason
