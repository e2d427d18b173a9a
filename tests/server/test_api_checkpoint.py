"""A job's runs show when each last reported a checkpoint (``flotilla.checkpoint()``)."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi.testclient import TestClient

from flotilla.store import CheckpointReport, JobState, SqlStore
from tests.server.api_support import spec, submit


def test_a_runs_reported_checkpoint_is_in_the_job_detail(
    client: TestClient, store: SqlStore
) -> None:
    (job,) = submit(client, {"jobs": [spec("train")]})
    run = store.record_run(job, "c1", {})
    assert client.get(f"/v1/jobs/{job}").json()["run"]["last_checkpoint_at"] is None
    store.transition(job, JobState.RUNNING, "started", run=run.id)
    at = datetime(2026, 11, 28, 3, 0, tzinfo=UTC)
    store.record_checkpoints([CheckpointReport(job, run.id, at)])
    detail = client.get(f"/v1/jobs/{job}").json()
    assert datetime.fromisoformat(detail["run"]["last_checkpoint_at"]) == at
    assert datetime.fromisoformat(detail["runs"][0]["last_checkpoint_at"]) == at
