"""A fake scheduler handle and job-spec builders for the API tests."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from fastapi.testclient import TestClient

from flotilla.backends.interface import LogChunk, LogsRequest, RunStatus, UnknownRun
from flotilla.scheduler.precedence import Precedence
from flotilla.service.handle import CycleReport
from flotilla.service.metrics import SchedulerMetrics
from flotilla.store import JobRecord, JobState, RunState, SqlStore, Transition


class FakeScheduler:
    """Answers as a scheduling loop would; records what the server asked of it."""

    def __init__(self) -> None:
        self.metrics = SchedulerMetrics()
        self.precedence = Precedence()
        self.reasons: dict[str, str] = {}
        self.logs_by_run: dict[str, bytes] = {}
        self.finished_runs: set[str] = set()
        self.cycle = CycleReport()
        self.wakes = 0
        self.cancelled_jobs: list[str] = []
        self.log_requests: list[LogsRequest] = []

    @property
    def is_leader(self) -> bool:
        return True

    def pending_reason(self, job_id: str) -> str | None:
        return self.reasons.get(job_id)

    def last_cycle(self) -> CycleReport:
        return self.cycle

    def run_status(self, job_id: str, run_id: str) -> RunStatus:
        raise UnknownRun(run_id)  # no engine behind it: describe shows no engine ids

    def logs(self, job_id: str, request: LogsRequest) -> LogChunk:
        self.log_requests.append(request)
        if request.run_id not in self.logs_by_run:
            raise UnknownRun(request.run_id)
        if request.replica is not None and request.replica > 0:
            raise ValueError(f"replica {request.replica}: the run has only replica 0")
        data = self.logs_by_run[request.run_id][request.offset : request.offset + request.limit]
        end = request.offset + len(data)
        complete = request.run_id in self.finished_runs and end == len(
            self.logs_by_run[request.run_id]
        )
        return LogChunk(request.run_id, request.stream, request.offset, end, data, complete)

    def wake(self) -> None:
        self.wakes += 1

    def cancelled(self, jobs: Sequence[JobRecord]) -> None:
        self.cancelled_jobs.extend(job.id for job in jobs)
        self.wakes += 1


def spec(name: str, queue: str = "team-a", **fields: Any) -> dict[str, Any]:
    """A valid job spec as JSON data (a command job)."""
    data: dict[str, Any] = {
        "name": name,
        "queue": queue,
        "tasks": [{"name": "main", "resources": {"cpu": 1}}],
        "payload": {"command": ["echo", name]},
    }
    data.update(fields)
    return data


def submit(client: TestClient, body: Any) -> list[str]:
    """POST /v1/jobs, which must accept it; the ids of the jobs made."""
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    ids: list[str] = response.json()["ids"]
    return ids


def failed_once(store: SqlStore, job_id: str, cluster: str, not_before: datetime) -> Transition:
    """The job's first attempt ran on ``cluster`` and exited 3; as the loop records a retry,
    the job is queued again, waiting until ``not_before`` for attempt 2 of its limit 2."""
    run = store.record_run(job_id, cluster, {"placements": []})
    retry = Transition(
        job_id,
        JobState.QUEUED,
        "retry 1 of 2: attempt 1 ended (failed: exited 3)",
        run.id,
        exit_code=3,
        message="exited 3",
        run_state=RunState.FAILED,
        not_before=not_before,
    )
    store.transition_many([retry])
    return retry
