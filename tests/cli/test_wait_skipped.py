"""A pipeline whose failure branch is not taken: ``on-failure`` (``condition: failed``) ends
``skipped`` when its dependency succeeds, and ``flotilla wait`` on the whole pipeline exits 0.
A failed job still makes ``wait`` exit 1. Real API app, loop, SQLite and local processes."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.cli.live_cli import run
from tests.live_service import LiveService


def pipeline(live: LiveService, prep_command: str) -> list[str]:
    prep = live.spec("prep", prep_command)
    train = {**live.spec("train", "echo train"), "depends_on": [{"job": "prep"}]}
    alert = live.spec("on-failure", "echo alert")
    alert["depends_on"] = [{"job": "prep", "condition": "failed"}]
    response = TestClient(live.app).post("/v1/jobs", json={"jobs": [prep, train, alert]})
    assert response.status_code == 201, response.text
    ids: list[str] = response.json()["ids"]
    return ids


def test_an_untaken_branch_is_skipped_and_wait_exits_0(live: LiveService) -> None:
    prep, train, alert = pipeline(live, "true")
    waited = run("wait", prep, train, alert)
    assert waited.exit_code == 0, waited.output
    assert f"{alert} skipped" in waited.output and f"{train} succeeded" in waited.output
    reason = live.store.get_job(alert).reason
    assert reason.startswith("dependency job default/prep")
    assert reason.endswith("ended succeeded; this job needed it failed")
    assert live.store.runs(alert) == []


def test_a_failed_job_still_fails_wait_while_its_dependent_is_skipped(live: LiveService) -> None:
    prep, train, alert = pipeline(live, "exit 3")
    waited = run("wait", prep, train, alert)
    assert waited.exit_code == 1, waited.output
    assert live.state(train).value == "skipped" and live.state(alert).value == "succeeded"
