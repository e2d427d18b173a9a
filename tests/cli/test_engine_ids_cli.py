"""Engine-native ids in ``flotilla describe`` (and ``GET /v1/jobs/{id}/engine-ids``, the SDK's
``engine_ids``), against a real service in the test process (real API app, loop, SQLite and
local processes): a local run is named by its process group, and no server path is shown."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from flotilla.sdk import Client
from tests.cli.live_cli import run
from tests.live_service import LiveService


def test_describe_names_a_running_local_replica_by_its_process_group(
    live: LiveService, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    job = live.submit("held-open", f"while [ ! -e {gate} ]; do sleep 0.05; done")
    live.wait_until(lambda: live.state(job).value == "running", "the job to run")
    with Client("http://testserver", http=TestClient(live.app)) as client:
        engine = client.engine_ids(job)
    [replica] = engine.replicas
    assert engine.attempt == 1 and replica.task == "main"
    assert replica.engine_id is not None and replica.engine_id.startswith("pid ")
    described = run("describe", job)
    assert described.exit_code == 0, described.output
    assert "Engine ids" in described.output and replica.engine_id in described.output
    as_json = run("describe", job, "--format", "json")
    assert json.loads(as_json.output)["engine_ids"]["replicas"][0]["engine_id"] == replica.engine_id
    raw = TestClient(live.app).get(f"/v1/jobs/{job}/engine-ids").text
    assert str(tmp_path) not in raw  # no state-dir path in the response
    gate.touch()
    live.wait_until(lambda: live.state(job).value == "succeeded", "the job to end")
