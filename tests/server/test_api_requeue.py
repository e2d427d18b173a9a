"""``POST /v1/jobs/{id}/requeue``: the answer for a job that holds a run, and a 409 naming why
for one being cancelled (its cancel wins; nothing is requeued). SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from flotilla.store import JobState, SqlStore
from tests.server.api_support import spec, submit


def running(client: TestClient, store: SqlStore, name: str, state: JobState) -> str:
    [job_id] = submit(client, spec(name))
    run = store.record_run(job_id, "c1", {})
    if state is not JobState.LEASED:
        store.transition(job_id, JobState.PENDING, "dispatched", run=run.id)
    if state is JobState.RUNNING:
        store.transition(job_id, JobState.RUNNING, "started", run=run.id)
    return job_id


@pytest.mark.parametrize("state", [JobState.LEASED, JobState.PENDING, JobState.RUNNING])
def test_a_job_holding_a_run_is_requeued(
    lifecycle_client: TestClient, any_store: SqlStore, state: JobState
) -> None:
    job_id = running(lifecycle_client, any_store, "held", state)
    response = lifecycle_client.post(f"/v1/jobs/{job_id}/requeue", json={"reason": "bad node"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["state"] == "preempted"
    assert body["reason"].startswith("requeue requested by ")
    assert body["reason"].endswith(": bad node")


def test_requeue_of_a_job_being_cancelled_answers_409_and_changes_nothing(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    job_id = running(lifecycle_client, any_store, "leaving", JobState.RUNNING)
    assert lifecycle_client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    response = lifecycle_client.post(f"/v1/jobs/{job_id}/requeue")
    assert response.status_code == 409, response.text
    assert f"job {job_id} is being cancelled: it cannot be requeued" in response.text
    after = any_store.get_job(job_id)
    assert after.state is JobState.RUNNING and after.cancel_requested
