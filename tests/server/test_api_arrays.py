"""Job arrays and retries through the REST API, over a real store (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient

from flotilla.store import JobState, SqlStore
from tests.server.api_support import failed_once, spec, submit


def test_an_array_is_one_id_over_its_elements_with_counts_by_state(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    response = lifecycle_client.post(
        "/v1/jobs", json=spec("sweep", array={"size": 3, "parallelism": 2})
    )
    assert response.status_code == 201, response.text
    ids = response.json()["ids"]
    jobs = [lifecycle_client.get(f"/v1/jobs/{job_id}").json() for job_id in ids]
    submitted = response.json()["jobs"]
    assert {job["array_id"] for job in submitted} == {jobs[0]["array_id"]}
    assert [job["name"] for job in jobs] == ["sweep-0", "sweep-1", "sweep-2"]
    assert [job["array_index"] for job in jobs] == [0, 1, 2]
    array_id = jobs[0]["array_id"]
    assert {job["array_id"] for job in jobs} == {array_id}
    any_store.cancel(ids[1], "not this one")
    array = lifecycle_client.get(f"/v1/arrays/{array_id}").json()
    assert (array["name"], array["queue"], array["size"], array["parallelism"]) == (
        "sweep",
        "team-a",
        3,
        2,
    )
    assert array["counts"] == {"queued": 2, "cancelled": 1}
    assert [job["id"] for job in array["jobs"]] == ids


def test_cancelling_an_array_cancels_every_unfinished_element(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    ids = submit(lifecycle_client, spec("sweep", array={"size": 3}))
    other = submit(lifecycle_client, spec("bystander"))
    array_id = any_store.get_job(ids[0]).array_id
    response = lifecycle_client.post(f"/v1/arrays/{array_id}/cancel", json={"reason": "enough"})
    assert response.status_code == 200, response.text
    assert len(response.json()["cancelled"]) == 3
    assert {any_store.get_job(job_id).state for job_id in ids} == {JobState.CANCELLED}
    assert any_store.get_job(other[0]).state is JobState.QUEUED


def test_an_array_id_prefix_names_its_array_as_a_job_id_prefix_names_its_job(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    """Tables show 8 characters of an id; an array id did not resolve by prefix."""
    ids = submit(lifecycle_client, spec("sweep", array={"size": 2}))
    array_id = any_store.get_job(ids[0]).array_id
    assert array_id is not None
    shown = lifecycle_client.get(f"/v1/arrays/{array_id[:8]}")
    assert shown.status_code == 200, shown.text
    assert shown.json()["id"] == array_id and [j["id"] for j in shown.json()["jobs"]] == ids
    cancelled = lifecycle_client.post(f"/v1/arrays/{array_id[:8]}/cancel", json={})
    assert cancelled.status_code == 200 and len(cancelled.json()["cancelled"]) == 2
    assert lifecycle_client.get(f"/v1/arrays/{array_id[:8]}zz").status_code == 404


def test_an_unknown_array_is_a_404_and_an_oversized_one_a_422(client: TestClient) -> None:
    assert client.get("/v1/arrays/nope").status_code == 404
    assert client.post("/v1/arrays/nope/cancel").status_code == 404
    response = client.post("/v1/jobs", json=spec("huge", array={"size": 10**9}))
    assert response.status_code == 422
    assert "array.size: 1000000000 is more than this server's limit" in response.text
    both = client.post("/v1/jobs", json=spec("both", count=2, array={"size": 2}))
    assert both.status_code == 422 and "array and count: give one, not both" in both.text


def test_a_retried_job_shows_its_failed_attempt_its_backoff_and_its_last_failure(
    client: TestClient, store: SqlStore
) -> None:
    (job_id,) = submit(client, spec("flaky", retry={"limit": 2, "backoff": "fixed", "delay": "1m"}))
    later = datetime.now(UTC) + timedelta(minutes=1)
    retry = failed_once(store, job_id, "local", not_before=later)
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert (job["state"], job["reason"]) == ("queued", retry.reason)
    assert datetime.fromisoformat(job["not_before"]) == later
    assert [(r["attempt"], r["state"], r["exit_code"]) for r in job["runs"]] == [(1, "failed", 3)]
    assert job["last_failure"] == "attempt 1: exited 3"
    second = store.record_run(job_id, "local", {"placements": []})
    assert second.attempt == 2
    leased = client.get(f"/v1/jobs/{job_id}").json()
    assert leased["not_before"] is None  # cleared once the wait is over
    assert leased["last_failure"] == "attempt 1: exited 3"  # kept while the retry runs
