"""``flotilla requeue`` and the SDK's and API's requeue (Slurm's ``scontrol requeue``), against
a real service in the test process (real API app, loop, SQLite and local processes)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from flotilla.sdk import Client
from tests.cli.live_cli import run
from tests.live_service import LiveService
from tests.timing import limit


def twice(live: LiveService, marker: Path) -> str:
    """A job whose first attempt runs until stopped and whose second exits 0."""
    return live.submit(
        "twice", f"if [ -e {marker} ]; then echo second; else touch {marker}; sleep 600; fi"
    )


def test_requeue_stops_a_running_job_and_it_runs_again(live: LiveService, tmp_path: Path) -> None:
    marker = tmp_path / "first-ran"
    job = twice(live, marker)
    live.wait_until(
        lambda: marker.exists() and live.state(job).value == "running", "the first attempt"
    )
    requeued = run("requeue", job[:8], "--reason", "node looks slow")
    assert requeued.exit_code == 0, requeued.output
    assert "twice: preempted" in requeued.output
    waited = run("wait", job)
    assert waited.exit_code == 0, waited.output
    with Client("http://testserver", http=TestClient(live.app)) as client:
        detail = client.get(job)
    assert detail.state == "succeeded"
    assert [run.attempt for run in detail.runs] == [1, 2]


def test_requeue_of_a_job_that_ended_is_refused_naming_its_state(live: LiveService) -> None:
    job = live.submit("done", "exit 3")
    live.wait_until(lambda: live.state(job).value == "failed", "the job to fail")
    refused = run("requeue", job)
    assert refused.exit_code == 1
    assert f"job {job} is failed: it has ended, so there is no run to requeue" in refused.output
    response = TestClient(live.app).post(f"/v1/jobs/{job}/requeue")
    assert response.status_code == 409


def test_the_sdk_requeues_with_the_callers_name_in_the_reason(
    live: LiveService, tmp_path: Path
) -> None:
    marker = tmp_path / "first-ran"
    job = twice(live, marker)
    live.wait_until(
        lambda: marker.exists() and live.state(job).value == "running", "the first attempt"
    )
    with Client("http://testserver", http=TestClient(live.app)) as client:
        requeued = client.requeue(job, "bad node")
        assert requeued.state == "preempted"
        assert requeued.reason.startswith("requeue requested by ")
        assert requeued.reason.endswith(": bad node")
        assert client.wait(job, timeout=limit(60)).state == "succeeded"
