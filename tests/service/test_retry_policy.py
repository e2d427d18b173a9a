"""What a job's retry policy makes of an attempt that ended badly, as the service writes it
(no loop, no store): the lifecycle core's answer (``lifecycle/machine.py``) as a transition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flotilla.backends.interface import BackendRunState, RunStatus
from flotilla.lifecycle.events import RunEnded
from flotilla.lifecycle.machine import step
from flotilla.lifecycle.runs import RunEnd
from flotilla.model import JobSpec, RetryCause
from flotilla.service.retry import (
    cause_of,
    counted_failures,
    failure_reason,
    transition_for,
    view_of,
)
from flotilla.store import JobRecord, JobState, RunRecord, RunState

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def status(state: BackendRunState, exit_code: int | None = None, message: str = "") -> RunStatus:
    return RunStatus("run-1", "job-1", "local", state, 0.0, exit_code=exit_code, message=message)


def test_the_cause_comes_from_the_runs_end() -> None:
    assert cause_of(status(BackendRunState.FAILED, 3, "exited with code 3")) is RetryCause.FAILED
    # A signal death is the command's failure (issue 35), counted like a non-zero exit.
    killed = status(BackendRunState.FAILED, -9, "killed by signal 9 (SIGKILL)")
    assert cause_of(killed) is RetryCause.FAILED
    stopped = status(BackendRunState.FAILED, -15, "exceeded max_runtime of 5s")
    assert cause_of(stopped) is RetryCause.FAILED  # Flotilla's own stop is the job's fault
    assert cause_of(status(BackendRunState.LOST, message="no record")) is RetryCause.LOST


def test_a_signal_death_names_its_signal_whatever_the_backend_wrote() -> None:
    kubelet = status(BackendRunState.FAILED, -11, "replica main/0 exited with code -11")
    assert failure_reason(kubelet) == (
        "replica main/0 exited with code -11 (killed by signal 11 (SIGSEGV))"
    )
    local = status(BackendRunState.FAILED, -9, "replica main/0 killed by signal 9 (SIGKILL)")
    assert failure_reason(local) == local.message
    assert failure_reason(status(BackendRunState.FAILED, 3)) == "exited 3"
    stopped = status(BackendRunState.FAILED, -15, "exceeded max_runtime of 5s")
    assert failure_reason(stopped) == stopped.message  # Flotilla's own stop, said already


def job(retry: dict[str, object] | None, attempt: int = 1) -> JobRecord:
    spec = JobSpec.model_validate(
        {
            "name": "train",
            "queue": "q",
            "tasks": [{"name": "main", "resources": {"cpu": 1}}],
            "retry": retry,
        }
    )
    run = RunRecord("run-1", "job-1", attempt, "local", {}, RunState.RUNNING, NOW)
    return JobRecord(
        "job-1", "train", "q", spec, JobState.RUNNING, 0, NOW, NOW, 1, 1, None, run=run
    )


def after_failure(
    record: JobRecord, end: RunEnd, reason: str, earlier: int
) -> tuple[JobState, RunState | None, datetime | None, str]:
    assert record.run is not None
    ended = RunEnded(end, reason)
    answer = step(view_of(record, failures=earlier), ended)
    change = transition_for(record, answer, ended, record.run.id, now=NOW)
    assert change is not None
    return change.new_state, change.run_state, change.not_before, change.reason


def test_a_covered_failure_requeues_with_its_backoff_and_keeps_the_run_failed() -> None:
    record = job({"limit": 3, "delay": "10s"}, attempt=3)
    state, run_state, not_before, reason = after_failure(record, RunEnd.FAILED, "exited 3", 2)
    assert (state, run_state) == (JobState.QUEUED, RunState.FAILED)
    assert not_before == NOW + timedelta(seconds=40)  # third failure: 10 s * 2**2
    assert reason.startswith("retry 3 of 3: attempt 3 ended (failed: exited 3)")
    assert reason.endswith("; not before 2026-11-24T12:00:40Z (40s backoff)")


def test_past_the_limit_the_job_fails_with_the_last_reason() -> None:
    record = job({"limit": 1}, attempt=2)
    state, run_state, _, reason = after_failure(record, RunEnd.NODE_FAILURE, "killed by SIGKILL", 1)
    assert (state, run_state) == (JobState.FAILED, RunState.FAILED)
    assert reason == "killed by SIGKILL (attempt 2, node_failure; retry limit of 1 reached)"


def test_no_policy_or_an_uncovered_cause_leaves_the_usual_handling() -> None:
    assert after_failure(job(None), RunEnd.FAILED, "x", 0)[:2] == (JobState.FAILED, None)
    narrow = job({"limit": 5, "on": ["failed"]})
    lost = after_failure(narrow, RunEnd.LOST, "run lost", 0)
    assert lost == (JobState.QUEUED, None, None, "run lost")  # at once, uncounted


def test_only_the_runs_recorded_failed_count_against_the_limit_and_the_backoff() -> None:
    """A run returned (a lost node re-queued uncounted), preempted or cancelled is an attempt
    the policy did not count: the next failure's backoff and limit ignore it."""
    history = [
        RunRecord(f"run-{n}", "job-1", n, "local", {}, state, NOW)
        for n, state in enumerate(
            [RunState.RETURNED, RunState.FAILED, RunState.PREEMPTED, RunState.CANCELLED], 1
        )
    ]
    assert counted_failures(history) == 1
    record = job({"limit": 3, "delay": "10s"}, attempt=5)
    _, _, not_before, reason = after_failure(
        record, RunEnd.FAILED, "exited 3", counted_failures(history)
    )
    assert not_before == NOW + timedelta(seconds=20)  # second counted failure: 10 s * 2
    assert reason.startswith("retry 2 of 3: attempt 5 ended")
