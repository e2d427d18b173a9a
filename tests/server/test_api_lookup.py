"""Jobs named as users name them: a name (its latest job), QUEUE/NAME, an id prefix; a
finished job's name used again; counts and live reasons in listings; logs of an attempt."""

from __future__ import annotations

from fastapi.testclient import TestClient

from flotilla.store import JobState, SqlStore
from tests.server.api_support import FakeScheduler, spec, submit


def test_resubmitting_a_job_works_and_its_name_means_the_latest(
    lifecycle_client: TestClient,
) -> None:
    """As ``sbatch job.sh`` twice gives two jobs (issue 37): a name in use, finished or not,
    gives another job, and the name then means the newest."""
    [first] = submit(lifecycle_client, spec("hello"))
    [live] = submit(lifecycle_client, spec("hello"))
    assert lifecycle_client.get("/v1/jobs/hello").json()["id"] == live != first
    assert lifecycle_client.post(f"/v1/jobs/{first}/cancel").status_code == 200
    [second] = submit(lifecycle_client, spec("hello"))
    assert lifecycle_client.get("/v1/jobs/hello").json()["id"] == second
    assert lifecycle_client.get("/v1/queues/team-a/jobs/hello").json()["id"] == second
    assert lifecycle_client.get(f"/v1/jobs/{first}").json()["state"] == "cancelled"


def test_every_job_route_takes_a_name_or_an_id_prefix(
    client: TestClient, store: SqlStore, scheduler: FakeScheduler
) -> None:
    [job_id] = submit(client, spec("train"))
    prefix = job_id[:10]
    assert client.get(f"/v1/jobs/{prefix}").json()["id"] == job_id
    assert client.get("/v1/jobs/train/events").json()[0]["job_id"] == job_id
    assert client.get(f"/v1/jobs/{prefix}/why").json()["job_id"] == job_id
    moved = client.post("/v1/jobs/train/priority", json={"priority": 7})
    assert moved.status_code == 200 and moved.json()["priority"] == 7
    run = store.record_run(job_id, "c1", {})
    scheduler.logs_by_run[run.id] = b"hi\n"
    assert client.get("/v1/jobs/train/logs").json()["data"] == "hi\n"
    assert client.post("/v1/jobs/train/cancel").json()["id"] == job_id
    store.transition(job_id, JobState.CANCELLED, "stopped", run=run.id)
    streamed = client.get(f"/v1/jobs/{prefix}/events/stream").text
    assert "event: end" in streamed and '"to_state":"cancelled"' in streamed


def test_an_ambiguous_name_is_409_listing_the_candidates(client: TestClient) -> None:
    in_a, in_b = submit(client, {"jobs": [spec("train"), spec("train", "team-b")]})
    response = client.get("/v1/jobs/train")
    assert response.status_code == 409
    assert response.json()["problems"] == [f"team-a/train ({in_a})", f"team-b/train ({in_b})"]
    assert "QUEUE/NAME" in response.json()["message"]
    assert client.get("/v1/queues/team-b/jobs/train").json()["id"] == in_b
    unknown = client.get("/v1/queues/team-b/jobs/nope")
    assert unknown.status_code == 404 and "'nope'" in unknown.json()["message"]


def test_listing_counts_every_match_and_shows_the_live_pending_reason(
    client: TestClient, scheduler: FakeScheduler
) -> None:
    ids = submit(client, {"jobs": [spec(f"j{index}") for index in range(5)]})
    scheduler.reasons[ids[4]] = "no cluster has 3 free GPUs"
    page = client.get("/v1/jobs", params={"limit": 2, "order": "newest", "total": True}).json()
    assert [job["id"] for job in page["jobs"]] == [ids[4], ids[3]]
    assert page["total"] == 5
    assert page["jobs"][0]["pending_reason"] == "no cluster has 3 free GPUs"
    assert page["jobs"][1]["pending_reason"] == "submitted"
    assert client.get("/v1/jobs").json()["total"] is None


def test_logs_of_an_earlier_attempt(
    client: TestClient, store: SqlStore, scheduler: FakeScheduler
) -> None:
    [job_id] = submit(client, spec("flaky"))
    first = store.record_run(job_id, "c1", {})
    store.transition(job_id, JobState.QUEUED, "lost with its node", run=first.id)
    second = store.record_run(job_id, "c1", {})
    scheduler.logs_by_run[first.id] = b"attempt one\n"
    scheduler.logs_by_run[second.id] = b"attempt two\n"
    assert client.get("/v1/jobs/flaky/logs").json()["data"] == "attempt two\n"
    old = client.get("/v1/jobs/flaky/logs", params={"attempt": 1}).json()
    assert (old["data"], old["run_id"]) == ("attempt one\n", first.id)
    missing = client.get("/v1/jobs/flaky/logs", params={"attempt": 5})
    assert missing.status_code == 404 and "no attempt 5" in missing.json()["message"]
