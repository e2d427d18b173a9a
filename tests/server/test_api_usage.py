"""GET /v1/usage: resource-hours over a range, grouped, and only what the caller may read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from flotilla.server import AuthSettings, create_app
from flotilla.server.auth import token_hash
from flotilla.store import JobState, SqlStore
from tests.server.api_support import FakeScheduler, spec

USERS = {
    "users": [
        {"name": "ana", "token_sha256": token_hash("ana-token"), "queues": {"team-a": ["submit"]}},
        {"name": "vi", "token_sha256": token_hash("vi-token"), "queues": {"team-b": ["read"]}},
        {"name": "ops", "token_sha256": token_hash("ops-token"), "admin": True},
    ]
}


def ran(store: SqlStore, job_id: str) -> None:
    """A run of one replica that started and is still running."""
    store.record_run(job_id, "c1", {"placements": [{"task": "main", "replica": 0, "node": "n"}]})
    store.transition(job_id, JobState.RUNNING, "started")


def submit(api: TestClient, token: str, *specs: dict[str, object]) -> list[str]:
    response = api.post("/v1/jobs", json={"jobs": list(specs)}, headers=bearer(token))
    assert response.status_code == 201, response.text
    ids: list[str] = response.json()["ids"]
    return ids


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def api(store: SqlStore, scheduler: FakeScheduler) -> TestClient:
    auth = AuthSettings.from_data(USERS)
    return TestClient(create_app(store, scheduler, auth, poll_interval=0))


def test_usage_reports_each_queue_with_totals(client: TestClient, store: SqlStore) -> None:
    gpu = {"name": "main", "replicas": 1, "resources": {"cpu": 2, "memory": "1Gi", "gpu": 1}}
    ids = client.post(
        "/v1/jobs", json={"jobs": [spec("a", tasks=[gpu]), spec("b", "team-b")]}
    ).json()["ids"]
    for job_id in ids:
        ran(store, job_id)
    body = client.get("/v1/usage", params={"since": "1h"}).json()
    assert body["by"] == "queue"
    assert [row["queue"] for row in body["rows"]] == ["team-a", "team-b"]  # most CPU first
    assert body["rows"][0]["jobs"] == 1 and body["rows"][0]["runs"] == 1
    assert body["rows"][0]["gpu_hours"] > 0 and body["rows"][1]["gpu_hours"] == 0
    assert body["total"]["runs"] == 2
    assert list(body["rows"][0])[:2] == ["queue", "jobs"] and "owner" not in body["rows"][0]
    assert "queue" not in body["total"]
    assert body["total"]["cpu_hours"] == pytest.approx(
        body["rows"][0]["cpu_hours"] + body["rows"][1]["cpu_hours"]
    )


def test_usage_takes_iso_times_and_refuses_bad_ranges_naming_the_field(
    client: TestClient,
) -> None:
    now = datetime.now(UTC)
    since = (now - timedelta(days=1)).isoformat()
    assert client.get("/v1/usage", params={"since": since, "by": "job"}).status_code == 200
    assert client.get("/v1/usage", params={"since": "2026-01-01"}).status_code == 200
    bad = client.get("/v1/usage", params={"since": "last tuesday"})
    assert bad.status_code == 422
    assert bad.json()["problems"] == [
        "since: expected an ISO 8601 time or a duration such as 7d, got 'last tuesday'"
    ]
    backwards = client.get("/v1/usage", params={"since": "1h", "until": "2h"})
    assert backwards.status_code == 422 and backwards.json()["problems"][0].startswith("until:")
    assert client.get("/v1/usage", params={"by": "colour"}).status_code == 422


def test_usage_counts_only_the_queues_a_user_may_read_and_their_own_jobs(
    api: TestClient, store: SqlStore
) -> None:
    (mine,) = submit(api, "ana-token", spec("mine"))
    others = submit(api, "ops-token", spec("team-a-other"), spec("team-b-job", "team-b"))
    for job_id in [mine, *others]:
        ran(store, job_id)

    def names(token: str) -> list[str]:
        response = api.get("/v1/usage", params={"by": "job"}, headers=bearer(token))
        assert response.status_code == 200, response.text
        return sorted(row["name"] for row in response.json()["rows"])

    assert names("ana-token") == ["mine"]
    assert names("vi-token") == ["team-b-job"]
    assert names("ops-token") == ["mine", "team-a-other", "team-b-job"]
    assert api.get("/v1/usage").status_code == 401
