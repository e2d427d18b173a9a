"""The API over a real scheduling loop (SQLite, local backend, real processes).

What these tests check comes from the loop itself, not from a fake: the pending reason the
engine gave, the output a process wrote, a cancel that ends the process and its children. The
fake scheduler stays in the tests about the API's own behaviour (validation, paging, auth).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.live_service import (
    LiveService,
    live_service,
    process_gone,
    read_pids,
    sleeper_writing_pids,
)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveService]:
    with live_service(tmp_path) as service:
        yield service


@pytest.fixture
def api(live: LiveService) -> Iterator[TestClient]:
    with TestClient(live.app) as client:
        yield client


def test_a_submitted_job_runs_and_its_output_is_served(live: LiveService, api: TestClient) -> None:
    response = api.post("/v1/jobs", json=live.spec("hello", "echo hello from a real process"))
    assert response.status_code == 201, response.text
    [job_id] = response.json()["ids"]
    live.wait_until(lambda: api.get(f"/v1/jobs/{job_id}").json()["state"] == "succeeded", "end")
    detail = api.get(f"/v1/jobs/{job_id}").json()
    [run] = detail["runs"]
    assert run["state"] == "succeeded" and run["exit_code"] == 0
    logs = api.get(f"/v1/jobs/{job_id}/logs").json()
    assert logs["data"] == "hello from a real process\n" and logs["complete"]
    states = [event["to_state"] for event in api.get(f"/v1/jobs/{job_id}/events").json()]
    assert states == ["queued", "leased", "pending", "running", "succeeded"]


def test_why_and_the_pending_reason_are_the_engines(live: LiveService, api: TestClient) -> None:
    too_big = live.cpus * 4
    held = {**live.spec("huge", "true", cpu=too_big), "hold_if_unfit": True}
    response = api.post("/v1/jobs", json=held)
    [job_id] = response.json()["ids"]
    live.wait_until(lambda: bool(live.loop.pending_reason(job_id)), "a cycle to explain it")
    engine_reason = live.loop.pending_reason(job_id)
    assert engine_reason is not None and "cpu" in engine_reason
    detail = api.get(f"/v1/jobs/{job_id}").json()
    assert detail["state"] == "queued" and detail["pending_reason"] == engine_reason
    why = api.get(f"/v1/jobs/{job_id}/why").json()
    assert engine_reason in str(why)


def test_a_job_bigger_than_any_node_is_refused_unless_held(
    live: LiveService, api: TestClient
) -> None:
    cpus = live.cpus * 4
    response = api.post("/v1/jobs", json=live.spec("huge", "true", cpu=cpus))
    assert response.status_code == 422
    assert "hold_if_unfit" in response.json()["message"]
    assert response.json()["problems"] == [
        f"tasks[0].resources.cpu: {cpus:g} per replica, but the largest node of the fleet has "
        f"{live.cpus:g}"
    ]
    assert live.store.list_jobs().jobs == []


def test_a_dependency_chain_runs_in_order_and_why_says_what_it_waits_for(
    live: LiveService, api: TestClient
) -> None:
    first = live.spec("prep", "sleep 1")
    second = {**live.spec("train", "echo trained"), "depends_on": [{"job": "prep"}]}
    response = api.post("/v1/jobs", json={"jobs": [second, first]})
    assert response.status_code == 201, response.text
    train, prep = response.json()["ids"]
    why = api.get(f"/v1/jobs/{train}/why").json()
    assert why["state"] == "queued"
    assert why["reason"].startswith(f"waits for job default/prep ({prep[:8]}) to succeed")
    assert [(item["job_id"], item["condition"]) for item in why["waiting_for"]] == [
        (prep, "succeeded")
    ]
    live.wait_until(lambda: live.state(train).value == "succeeded", "the chain to finish")
    detail = api.get(f"/v1/jobs/{train}").json()
    assert detail["dependencies"] == [
        {"job_id": prep, "job": "prep", "condition": "succeeded", "state": None}
    ]


def test_cancel_of_a_running_job_ends_its_process_and_children(
    live: LiveService, api: TestClient, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    command = sleeper_writing_pids(pids)
    [job_id] = api.post("/v1/jobs", json=live.spec("sleeper", command)).json()["ids"]
    live.wait_until(lambda: len(read_pids(pids)) == 2, "the job to start its processes")
    live.wait_until(lambda: live.state(job_id).value == "running", "running")
    shell, child = read_pids(pids)
    assert not process_gone(shell) and not process_gone(child)
    response = api.post(f"/v1/jobs/{job_id}/cancel", json={"reason": "no longer needed"})
    assert response.status_code == 200, response.text
    live.wait_until(lambda: live.state(job_id).value == "cancelled", "the cancel to finish")
    # The job is cancelled only once the backend saw its processes end.
    assert process_gone(shell) and process_gone(child)
    [run] = api.get(f"/v1/jobs/{job_id}").json()["runs"]
    assert run["state"] == "cancelled"
