"""The service's scheduling loop against a real store (SQLite) and the real local backend.

Jobs are real processes on this machine; the loop's cycles are driven by the test.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flotilla.backends.interface import LogsRequest
from flotilla.framework.snapshot import CycleResult, SchedulingSnapshot
from flotilla.model import JobSpec
from flotilla.model.scenario import Mode
from flotilla.scheduler.precedence import Precedence
from flotilla.scheduler.runner import RunnerState
from flotilla.service.loop import LoopSettings
from flotilla.store import TERMINAL_JOB_STATES, CycleWrite, JobState
from tests.live_service import local_loop, process_gone, read_pids, sleeper_writing_pids
from tests.service_builders import loop_over
from tests.timing import deadline, wait_until


class Service:
    def __init__(
        self, tmp_path: Path, mode: Mode = Mode.SYNC, algorithm_process: bool = False
    ) -> None:
        self.store, self.backend, self.loop = local_loop(
            tmp_path,
            LoopSettings(
                mode=mode,
                cycle_interval=0.05,
                replica="replica-a",
                algorithm_process=algorithm_process,
            ),
        )

    def submit(
        self, name: str, command: str, max_runtime: float | None = None, **resources: float
    ) -> str:
        spec = JobSpec.model_validate(
            {
                "name": name,
                "queue": "default",
                "tasks": [{"name": "main", "resources": resources or {"cpu": 0.1}}],
                "payload": {"command": ["sh", "-c", command]},
                "max_runtime": max_runtime,
            }
        )
        return self.store.submit_jobs([spec])[0]

    def state(self, job_id: str) -> JobState:
        return self.store.get_job(job_id).state

    def cycle_until(self, done: Callable[[], bool], limit: float = 20.0) -> None:
        """Cycle the loop until ``done``, for ``limit`` seconds on the reference machine."""
        wait_until(done, "the loop to get there", limit, 0.05, self.loop.cycle)

    def close(self) -> None:
        self.loop.close()
        self.backend.close()
        self.store.close()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    running = Service(tmp_path)
    yield running
    running.close()


def test_a_submitted_job_runs_as_a_process_and_succeeds_with_its_output(service: Service) -> None:
    job = service.submit("hello", "echo hello from flotilla")
    service.cycle_until(lambda: service.state(job) is JobState.SUCCEEDED)
    events = [event.to_state for event in service.store.events(job)]
    assert events[-4:] == [JobState.LEASED, JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED]
    chunk = service.loop.logs(job, LogsRequest(run_id=""))
    assert b"hello from flotilla" in chunk.data


def test_a_failing_command_fails_the_job_with_its_exit_code(service: Service) -> None:
    job = service.submit("broken", "exit 3")
    service.cycle_until(lambda: service.state(job) is JobState.FAILED)
    assert service.store.runs(job)[-1].exit_code == 3


def test_a_run_gets_its_queue_name_placement_and_devices_in_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOTILLA_LOCAL_GPUS", "2")
    service = Service(tmp_path)
    try:
        command = (
            'echo "$FLOTILLA_QUEUE $FLOTILLA_JOB_NAME $FLOTILLA_REPLICA $CUDA_VISIBLE_DEVICES"'
        )
        job = service.submit("env", command, cpu=0.1, gpu=2)
        service.cycle_until(lambda: service.state(job) is JobState.SUCCEEDED)
        chunk = service.loop.logs(job, LogsRequest(run_id=""))
        assert chunk.data.decode().split() == ["default", "env", "0", "0,1"]
    finally:
        service.close()


def test_a_run_left_leased_by_a_dead_leader_is_dispatched_once_by_the_next(
    service: Service, tmp_path: Path
) -> None:
    """A leader that recorded a lease and died before dispatching it: the next leader's cycle
    dispatches the run (the same run, no new attempt) and the job runs once."""
    marks = tmp_path / "marks"
    job = service.submit("orphan", f"echo ran >> {marks}")
    node = service.backend.inventory().nodes[0].name
    placement = {"task": "main", "replica": 0, "node": node, "gpus": [], "shares": []}
    run = service.store.record_run(
        job, "local", {"cluster": "local", "placements": [{**placement, "gpu_memory": 0.0}]}
    )
    service.cycle_until(lambda: service.state(job) is JobState.SUCCEEDED)
    assert [item.id for item in service.store.runs(job)] == [run.id]
    assert marks.read_text().split() == ["ran"]


def test_a_run_past_its_max_runtime_is_stopped_and_fails(service: Service) -> None:
    job = service.submit("endless", "sleep 600", max_runtime=0.5)
    service.cycle_until(lambda: service.state(job) is JobState.FAILED)
    assert "max_runtime" in (service.store.runs(job)[-1].message or "")


def test_cancelling_a_running_job_stops_its_process(service: Service, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    job = service.submit("sleeper", sleeper_writing_pids(pids))
    service.cycle_until(
        lambda: service.state(job) is JobState.RUNNING and len(read_pids(pids)) == 2
    )
    shell, child = read_pids(pids)
    assert not process_gone(shell) and not process_gone(child)
    service.store.cancel(job, "no longer needed")
    service.cycle_until(lambda: service.state(job) is JobState.CANCELLED)
    # Cancelled means stopped: the job's process and the child it started are gone.
    assert process_gone(shell) and process_gone(child)
    assert service.store.runs(job)[-1].state.value == "cancelled"


def test_a_job_no_node_can_hold_waits_with_a_reason(service: Service) -> None:
    job = service.submit("huge", "true", cpu=100000)
    service.loop.cycle()
    assert service.state(job) is JobState.QUEUED
    assert "cpu" in (service.loop.pending_reason(job) or "")


def test_only_one_of_two_loops_on_one_store_leads(service: Service) -> None:
    other = loop_over(service.store, {"local": service.backend}, replica="replica-b")
    service.loop.cycle()
    other.cycle()
    assert service.loop.is_leader and not other.is_leader
    service.loop.close()
    other.cycle()
    assert other.is_leader
    other.close()


@pytest.mark.parametrize("algorithm_process", [False, True], ids=["thread", "process"])
def test_async_mode_applies_a_cancel_while_a_slow_round_is_in_flight(
    tmp_path: Path, algorithm_process: bool
) -> None:
    service = Service(tmp_path, Mode.ASYNC, algorithm_process)
    try:
        release = tmp_path / "release"  # a file: the round may be in a child process
        original = service.loop.algorithm.schedule

        def slow(
            snapshot: SchedulingSnapshot,
            cancel: threading.Event | None = None,
            precedence: Precedence | None = None,
        ) -> CycleResult:
            due = deadline(30)  # only a bound for a test that fails before it releases
            while not release.exists() and not due.expired():
                time.sleep(0.01)
            return original(snapshot, cancel, precedence)

        service.loop.algorithm.schedule = slow  # type: ignore[method-assign]
        waiting = service.submit("waiting", "true")
        service.loop.cycle()  # triggers a round that blocks until released
        assert service.loop.runner is not None
        assert service.loop.runner.state in (RunnerState.RUN_REQUESTED, RunnerState.RUNNING)
        service.store.cancel(waiting, "changed my mind")
        service.loop.cycle()
        assert service.state(waiting) is JobState.CANCELLED  # while the round is still in flight
        release.touch()
        service.cycle_until(lambda: service.loop.runner.state is RunnerState.IDLE)  # type: ignore[union-attr]
        assert service.state(waiting) is JobState.CANCELLED  # its stale decision was dropped
    finally:
        service.close()


def test_metrics_show_queue_depth_allocation_and_share(service: Service) -> None:
    from prometheus_client import generate_latest

    job = service.submit("sleeper", "sleep 30", cpu=1)
    service.cycle_until(lambda: service.state(job) is JobState.RUNNING)
    text = generate_latest(service.loop.metrics.registry).decode()
    assert 'flotilla_queue_allocated{queue="default",resource="cpu"} 1.0' in text
    assert 'flotilla_queue_dominant_share{queue="default"}' in text
    assert "flotilla_cycle_seconds_count" in text and "flotilla_algorithm_seconds_count" in text
    assert "flotilla_leader 1.0" in text
    node = service.store.list_nodes("local")[0].name
    cores = service.store.list_nodes("local")[0].resources["cpu"]
    assert f'flotilla_cluster_capacity{{cluster="local",resource="cpu"}} {cores}' in text
    assert 'flotilla_cluster_allocated{cluster="local",resource="cpu"} 1.0' in text
    assert f'flotilla_node_allocated{{cluster="local",node="{node}",resource="cpu"}} 1.0' in text
    assert 'flotilla_queue_wait_seconds_count{queue="default"} 1.0' in text
    service.store.cancel(job, "done looking")
    service.cycle_until(lambda: service.state(job) is JobState.CANCELLED)


def test_a_cancel_while_a_cycle_commits_leaves_the_other_jobs_of_the_batch_scheduled(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 12, defect 5: the user cancels one job between the snapshot and the commit."""
    jobs = [service.submit(f"job-{index}", "true") for index in range(3)]
    commit_cycle = service.store.commit_cycle
    cancelled: list[str] = []

    def cancel_first_then_commit(write: CycleWrite, **kwargs: Any) -> Any:
        if write.runs and not cancelled:
            cancelled.append(service.store.cancel(jobs[0], "changed my mind").id)
        return commit_cycle(write, **kwargs)

    monkeypatch.setattr(service.store, "commit_cycle", cancel_first_then_commit)
    service.loop.cycle()
    assert cancelled == [jobs[0]]
    assert service.state(jobs[0]) is JobState.CANCELLED
    for job in jobs[1:]:
        assert service.state(job) is not JobState.QUEUED
    service.cycle_until(lambda: all(service.state(job) in TERMINAL_JOB_STATES for job in jobs))
    assert [service.state(job) for job in jobs[1:]] == [JobState.SUCCEEDED] * 2


def test_a_draining_loop_follows_running_jobs_to_their_end_and_starts_no_new_one(
    service: Service, tmp_path: Path
) -> None:
    gate = tmp_path / "go"
    running = service.submit("running", f"while [ ! -e {gate} ]; do sleep 0.05; done")
    service.cycle_until(lambda: service.state(running) is JobState.RUNNING)
    service.loop.drain()
    waiting = service.submit("waiting", "true")
    gate.touch()
    service.cycle_until(lambda: service.state(running) is JobState.SUCCEEDED)
    for _ in range(5):
        service.loop.cycle()
    assert service.state(waiting) is JobState.QUEUED
