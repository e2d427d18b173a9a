"""Retries and job arrays in the service: the real loop, a real store, real processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flotilla.backends.interface import BackendUnavailable, Inventory, LogsRequest, RunStatus
from flotilla.backends.local.backend import LocalBackend
from flotilla.model import JobSpec
from flotilla.store import ACTIVE_JOB_STATES, JobState, RunState
from tests.service.test_service_loop import Service as LoopService
from tests.service_builders import loop_over


class Service(LoopService):
    """The service loop's harness, plus ``restart``: a new backend and loop over the same
    store and state dir, as a restarted ``flotilla up``."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.tmp_path = tmp_path

    def restart(self) -> None:
        self.loop.close()
        self.backend.close()
        self.backend = LocalBackend(
            cluster="local", state_dir=self.tmp_path / "runs", grace_period=1.0
        )
        self.loop = loop_over(
            self.store, {"local": self.backend}, cycle_interval=0.05, replica="replica-b"
        )

    def submit_spec(self, command: str, **fields: Any) -> list[str]:
        spec = JobSpec.model_validate(
            {
                "name": "job",
                "queue": "default",
                "tasks": [{"name": "main", "resources": {"cpu": 0.1}}],
                "payload": {"command": ["sh", "-c", command]},
                **fields,
            }
        )
        return self.store.submit_jobs([spec])

    def output(self, job_id: str) -> str:
        return self.loop.logs(job_id, LogsRequest(run_id="")).data.decode()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    running = Service(tmp_path)
    yield running
    running.close()


def ended(service: Service, job_id: str) -> Callable[[], bool]:
    return lambda: service.state(job_id) in (JobState.SUCCEEDED, JobState.FAILED)


def test_a_failing_job_is_retried_and_each_attempt_is_a_run_of_its_history(
    service: Service, tmp_path: Path
) -> None:
    tries = tmp_path / "tries"
    # Fails twice (exit 3, exit 3), then succeeds.
    command = f"echo x >> {tries}; [ $(wc -l < {tries}) -ge 3 ] || exit 3"
    (job,) = service.submit_spec(command, retry={"limit": 3, "backoff": "none"})
    service.cycle_until(ended(service, job))
    assert service.state(job) is JobState.SUCCEEDED
    runs = service.store.runs(job)
    assert [run.attempt for run in runs] == [1, 2, 3]
    assert [run.state for run in runs] == [RunState.FAILED, RunState.FAILED, RunState.SUCCEEDED]
    assert [run.exit_code for run in runs] == [3, 3, 0]
    retried = [e.reason for e in service.store.events(job) if e.to_state is JobState.QUEUED]
    assert retried[1:] == [
        "retry 1 of 3: attempt 1 ended (failed: replica main/0 exited with code 3)",
        "retry 2 of 3: attempt 2 ended (failed: replica main/0 exited with code 3)",
    ]


def test_the_last_failure_stays_the_reason_once_the_retries_are_used_up(
    service: Service,
) -> None:
    (job,) = service.submit_spec("echo doomed; exit 4", retry={"limit": 1, "backoff": "none"})
    service.cycle_until(ended(service, job))
    record = service.store.get_job(job)
    assert record.state is JobState.FAILED
    assert record.reason == (
        "replica main/0 exited with code 4 (attempt 2, failed; retry limit of 1 reached)"
    )
    runs = service.store.runs(job)
    assert [(run.state, run.exit_code) for run in runs] == [(RunState.FAILED, 4)] * 2


def test_a_cause_the_policy_does_not_name_fails_the_job_at_once(service: Service) -> None:
    (job,) = service.submit_spec("exit 1", retry={"limit": 5, "on": ["node_failure"]})
    service.cycle_until(ended(service, job))
    assert service.state(job) is JobState.FAILED
    assert len(service.store.runs(job)) == 1


def test_a_process_killed_by_a_signal_is_a_failure_and_retried(
    service: Service, tmp_path: Path
) -> None:
    first = tmp_path / "first"
    command = f"if [ ! -e {first} ]; then touch {first}; kill -9 $$; fi; echo survived"
    (job,) = service.submit_spec(command, retry={"limit": 1, "backoff": "none", "on": ["failed"]})
    service.cycle_until(ended(service, job))
    assert service.state(job) is JobState.SUCCEEDED
    first_run = service.store.runs(job)[0]
    assert (first_run.state, first_run.exit_code) == (RunState.FAILED, -9)
    events = [e.reason for e in service.store.events(job) if e.to_state is JobState.QUEUED]
    assert events[-1].endswith("(failed: replica main/0 killed by signal 9 (SIGKILL))")


def test_a_signal_death_without_a_retry_policy_fails_the_job_once(service: Service) -> None:
    """Issue 35: read as a node failure, a job that kills itself was re-queued at once,
    uncounted, forever (24 runs in 30 s)."""
    (job,) = service.submit_spec("kill -9 $$")
    service.cycle_until(ended(service, job))
    record = service.store.get_job(job)
    assert record.state is JobState.FAILED
    assert record.reason == "replica main/0 killed by signal 9 (SIGKILL)"
    assert [(run.state, run.exit_code) for run in service.store.runs(job)] == [
        (RunState.FAILED, -9)
    ]


def test_signal_deaths_count_against_the_retry_limit(service: Service) -> None:
    """A segfault (SIGSEGV) every attempt: retried ``limit`` times, then the job fails."""
    (job,) = service.submit_spec(
        "kill -SEGV $$", retry={"limit": 2, "backoff": "none", "on": ["failed"]}
    )
    service.cycle_until(ended(service, job))
    record = service.store.get_job(job)
    assert record.state is JobState.FAILED
    assert record.reason == (
        "replica main/0 killed by signal 11 (SIGSEGV) (attempt 3, failed; retry limit of 2 reached)"
    )
    assert [run.exit_code for run in service.store.runs(job)] == [-11] * 3


def test_the_backoff_is_stored_with_the_job_and_outlives_a_restart(
    service: Service, tmp_path: Path
) -> None:
    tries = tmp_path / "tries"
    command = f"echo x >> {tries}; [ $(wc -l < {tries}) -ge 2 ] || exit 3"
    (job,) = service.submit_spec(command, retry={"limit": 2, "backoff": "fixed", "delay": "1.5s"})
    service.cycle_until(lambda: len(service.store.runs(job)) == 1 and ended_run(service, job))
    waiting = service.store.get_job(job)
    assert waiting.state is JobState.QUEUED and waiting.not_before is not None
    service.loop.cycle()
    assert "waiting out its retry backoff until" in (service.loop.pending_reason(job) or "")
    service.restart()  # a new scheduler: nothing of the wait was in memory only
    service.cycle_until(ended(service, job))
    assert service.state(job) is JobState.SUCCEEDED
    second = service.store.runs(job)[1]
    assert second.created_at >= waiting.not_before


def ended_run(service: Service, job_id: str) -> bool:
    return service.state(job_id) is JobState.QUEUED and bool(service.store.runs(job_id))


def test_array_elements_know_their_index_and_share_one_array_id(service: Service) -> None:
    command = 'echo "$FLOTILLA_ARRAY_ID $FLOTILLA_ARRAY_INDEX $FLOTILLA_ARRAY_SIZE"'
    jobs = service.submit_spec(command, array={"size": 3})
    records = [service.store.get_job(job) for job in jobs]
    assert [record.name for record in records] == ["job-0", "job-1", "job-2"]
    array_id = records[0].array_id
    assert array_id is not None and {record.array_id for record in records} == {array_id}
    service.cycle_until(lambda: all(service.state(job) is JobState.SUCCEEDED for job in jobs))
    for index, job in enumerate(jobs):
        assert service.output(job).split() == [array_id, str(index), "3"]


def test_an_array_runs_at_most_parallelism_elements_at_once(service: Service) -> None:
    jobs = service.submit_spec("sleep 0.3", array={"size": 4, "parallelism": 2})
    most = 0

    def done() -> bool:
        nonlocal most
        states = [service.state(job) for job in jobs]
        most = max(most, sum(state in ACTIVE_JOB_STATES for state in states))
        return all(state is JobState.SUCCEEDED for state in states)

    service.cycle_until(done)
    assert most == 2
    held = service.store.events(jobs[3])
    assert held[0].to_state is JobState.QUEUED


def test_array_elements_start_in_index_order(service: Service) -> None:
    """docs/jobs.md: held elements wait in index order. The first ``parallelism`` admitted
    were those the snapshot builder happened to convert first (a set's order: 1 and 5
    before 0); 20 elements make an accidental index order of the first two 1 in 190."""
    jobs = service.submit_spec("true", array={"size": 20, "parallelism": 2})
    service.cycle_until(lambda: all(service.state(job) is JobState.SUCCEEDED for job in jobs))
    leased = sorted(
        (event.id, index)
        for index, job in enumerate(jobs)
        for event in service.store.events(job)
        if event.to_state is JobState.LEASED
    )
    assert [index for _, index in leased] == list(range(20))


class Flaky(LocalBackend):
    """The local backend, silent (unreachable) once ``down`` is set."""

    down = False

    def inventory(self) -> Inventory:
        if self.down:
            raise BackendUnavailable("switched off by the test")
        return super().inventory()

    def poll(self) -> list[RunStatus]:
        if self.down:
            raise BackendUnavailable("switched off by the test")
        return super().poll()


def test_a_cluster_that_stops_answering_is_a_node_failure_for_its_runs(tmp_path: Path) -> None:
    service = Service(tmp_path)
    service.backend.close()
    backend = Flaky(
        cluster="local", state_dir=tmp_path / "runs", grace_period=1.0, stop_runs_on_close=True
    )
    service.backend = backend
    service.loop.close()
    service.loop = loop_over(
        service.store,
        {"local": backend},
        cycle_interval=0.05,
        replica="replica-c",
        heartbeat_timeout=0.5,
    )
    try:
        (counted,) = service.submit_spec(
            "sleep 30", retry={"limit": 1, "backoff": "none", "on": ["node_failure"]}
        )
        (plain,) = service.submit_spec("sleep 30", name="plain")
        service.cycle_until(
            lambda: {service.state(counted), service.state(plain)} == {JobState.RUNNING}
        )
        backend.down = True
        service.cycle_until(
            lambda: {service.state(counted), service.state(plain)} == {JobState.QUEUED}
        )
        counted_run, plain_run = service.store.runs(counted)[0], service.store.runs(plain)[0]
        assert counted_run.state is RunState.FAILED  # counted against its limit
        assert plain_run.state is RunState.RETURNED  # re-queued as always, not counted
        assert service.store.get_job(counted).reason == (
            "retry 1 of 1: attempt 1 ended (node_failure: cluster local became unreachable)"
        )
    finally:
        backend.down = False
        service.close()
