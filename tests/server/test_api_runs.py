"""GET /v1/runs: the per-run report (``flotilla sacct``) — each run with its exit code, nodes,
elapsed, CPU time and peak memory; filtered by queue, owner, state and time; and only the
runs of jobs the caller may read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from flotilla.model.run_resources import RunResources
from flotilla.server import AuthSettings, create_app
from flotilla.store import JobState, SqlStore
from tests.server.api_support import FakeScheduler, spec
from tests.server.test_api_usage import USERS, bearer, ran, submit

MIB = 2**20


@pytest.fixture
def api(store: SqlStore, scheduler: FakeScheduler) -> TestClient:
    auth = AuthSettings.from_data(USERS)
    return TestClient(create_app(store, scheduler, auth, poll_interval=0))


def ended(store: SqlStore, job_id: str, state: JobState, exit_code: int) -> str:
    """Its run ran and ended with ``exit_code``; the run's id."""
    ran(store, job_id)
    store.transition(job_id, state, "ended", exit_code=exit_code)
    run = store.get_job(job_id).run
    assert run is not None
    return run.id


def names(api: TestClient, token: str, **params: object) -> list[str]:
    response = api.get("/v1/runs", params=params, headers=bearer(token))
    assert response.status_code == 200, response.text
    return [run["name"] for run in response.json()["runs"]]


def test_each_run_shows_its_end_nodes_and_what_its_backend_measured(
    api: TestClient, store: SqlStore
) -> None:
    done, going = submit(api, "ops-token", spec("done"), spec("going"))
    run_id = ended(store, done, JobState.SUCCEEDED, 0)
    store.record_run_resources({run_id: RunResources(cpu_seconds=12.5, memory_peak=80 * MIB)})
    ran(store, going)

    response = api.get("/v1/runs", params={"since": "1h"}, headers=bearer("ops-token"))
    assert response.status_code == 200, response.text
    first, second = response.json()["runs"]
    assert (first["name"], first["queue"], first["owner"]) == ("done", "team-a", "ops")
    assert first["state"] == "succeeded" and first["exit_code"] == 0
    assert first["nodes"] == ["n"] and first["attempt"] == 1
    assert first["cpu_seconds"] == 12.5 and first["memory_peak"] == 80 * MIB
    assert first["elapsed_seconds"] is not None and first["elapsed_seconds"] >= 0
    # Still running: not measured yet (null, shown as "-"), elapsed up to now.
    assert second["name"] == "going" and second["state"] == "running"
    assert second["cpu_seconds"] is None and second["memory_peak"] is None
    assert second["finished_at"] is None and second["elapsed_seconds"] is not None
    # The job's own page carries them too.
    [run] = api.get(f"/v1/jobs/{done}", headers=bearer("ops-token")).json()["runs"]
    assert run["cpu_seconds"] == 12.5 and run["memory_peak"] == 80 * MIB


def test_the_report_filters_by_queue_owner_state_and_time(api: TestClient, store: SqlStore) -> None:
    (mine,) = submit(api, "ana-token", spec("ana-ok"))
    failed, other, running = submit(
        api, "ops-token", spec("ops-failed"), spec("ops-b", "team-b"), spec("ops-running")
    )
    ended(store, mine, JobState.SUCCEEDED, 0)
    ended(store, failed, JobState.FAILED, 3)
    ended(store, other, JobState.SUCCEEDED, 0)
    ran(store, running)

    everything = ["ana-ok", "ops-failed", "ops-b", "ops-running"]
    assert names(api, "ops-token") == everything
    assert names(api, "ops-token", queue="team-b") == ["ops-b"]
    assert names(api, "ops-token", queue=["team-a", "team-b"]) == everything
    assert names(api, "ops-token", owner="ana") == ["ana-ok"]
    assert names(api, "ops-token", state="failed") == ["ops-failed"]
    assert names(api, "ops-token", state=["failed", "running"]) == ["ops-failed", "ops-running"]
    # Since a moment after every end: only the run still going was active then.
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert names(api, "ops-token", since=later) == ["ops-running"]
    assert names(api, "ops-token", limit=2) == ["ops-b", "ops-running"]  # the newest two


def test_a_token_reads_only_the_runs_of_its_queues_and_its_own_jobs(
    api: TestClient, store: SqlStore
) -> None:
    (mine,) = submit(api, "ana-token", spec("mine"))
    others = submit(api, "ops-token", spec("team-a-other"), spec("team-b-job", "team-b"))
    for job_id in [mine, *others]:
        ran(store, job_id)
    assert names(api, "ana-token") == ["mine"]  # submit on team-a, no read: own jobs only
    assert names(api, "ana-token", queue="team-b") == []
    assert names(api, "vi-token") == ["team-b-job"]  # read on team-b
    assert names(api, "vi-token", queue="team-a") == []
    assert names(api, "ops-token") == ["mine", "team-a-other", "team-b-job"]
    assert api.get("/v1/runs").status_code == 401


def test_bad_filters_are_refused_naming_the_field(api: TestClient) -> None:
    unknown = api.get("/v1/runs", params={"queue": "nope"}, headers=bearer("ops-token"))
    assert unknown.status_code == 404 and "nope" in unknown.text
    bad_since = api.get("/v1/runs", params={"since": "yesterday"}, headers=bearer("ops-token"))
    assert bad_since.status_code == 422
    assert bad_since.json()["problems"][0].startswith("since:")
    bad_state = api.get("/v1/runs", params={"state": "done"}, headers=bearer("ops-token"))
    assert bad_state.status_code == 422 and "state" in bad_state.text
