"""/metrics, /healthz, /readyz and the OpenAPI document."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from flotilla.server import AuthSettings, create_app
from flotilla.store import SqlStore, make_engine
from tests.server.api_support import FakeScheduler, spec


def test_metrics_expose_the_scheduler_registry_and_api_requests(
    client: TestClient, scheduler: FakeScheduler
) -> None:
    scheduler.metrics.queue_depth.labels("team-a").set(4)
    client.post("/v1/jobs", json=spec("a"))
    client.get("/v1/jobs/nope")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'flotilla_queue_depth{queue="team-a"} 4.0' in text
    assert 'flotilla_api_requests_total{method="POST",route="/v1/jobs",status="201"} 1.0' in text
    assert 'route="/v1/jobs/{job_id}",status="404"' in text
    assert "/v1/jobs/nope" not in text


def test_metrics_without_a_scheduler_have_the_api_metrics(store: SqlStore) -> None:
    client = TestClient(create_app(store, None, AuthSettings.disabled()))
    text = client.get("/metrics").text
    assert "flotilla_api_requests_total" in text and "flotilla_queue_depth" not in text


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json()["status"] == "ok"
    assert client.get("/readyz").json()["status"] == "ready"


def test_not_ready_when_the_schema_is_not_migrated(tmp_path: Path) -> None:
    unmigrated = SqlStore(make_engine(f"sqlite:///{tmp_path}/empty.db"))
    client = TestClient(create_app(unmigrated, None, AuthSettings.disabled()))
    response = client.get("/readyz")
    assert response.status_code == 503 and response.json()["status"] == "unavailable"
    assert client.get("/healthz").status_code == 200


def test_not_ready_when_the_schema_is_behind_the_code(client: TestClient, store: SqlStore) -> None:
    with store.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE alembic_version SET version_num = 'older'")
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["detail"].startswith("schema at revision older")


def test_openapi_documents_the_routes_and_the_job_spec(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    for path in ("/v1/jobs", "/v1/jobs/{job_id}/why", "/v1/queues/{name}", "/metrics"):
        assert path in schema["paths"]
    assert "tasks" in schema["components"]["schemas"]["JobSpec"]["properties"]
    assert "TaskSpec" in schema["components"]["schemas"]
    assert client.get("/docs").status_code == 200


def test_metrics_count_submissions_and_every_transition_including_api_cancels(
    client: TestClient,
) -> None:
    ids = client.post("/v1/jobs", json={"jobs": [spec("a"), spec("b"), spec("c", "team-b")]})
    first, second, _third = ids.json()["ids"]
    client.post(f"/v1/jobs/{first}/cancel")
    client.post("/v1/jobs/cancel", json={"queue": "team-b"})
    text = client.get("/metrics").text
    assert 'flotilla_jobs_submitted_total{queue="team-a"} 2.0' in text
    assert 'flotilla_jobs_submitted_total{queue="team-b"} 1.0' in text
    assert 'flotilla_job_transitions_total{from_state="none",state="queued"} 3.0' in text
    assert 'flotilla_job_transitions_total{from_state="queued",state="cancelled"} 2.0' in text
    assert second  # left queued: counted once, as submitted
