"""A pipeline whose failure branch is not taken: ``on-failure`` (``condition: failed``) ends
``skipped`` when its dependency succeeds, and ``flotilla wait`` on the whole pipeline exits 0.
A failed job still makes ``wait`` exit 1. Real API app, loop, SQLite and local processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from flotilla.cli import client as cli_client
from flotilla.cli.main import app
from tests.live_service import LiveService, live_service


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveService]:
    with live_service(tmp_path) as service:

        def factory(server: str, token: str | None) -> httpx.Client:
            return TestClient(service.app, base_url=server)

        monkeypatch.setattr(cli_client, "client_factory", factory)
        yield service


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
    waited = CliRunner().invoke(app, ["wait", prep, train, alert])
    assert waited.exit_code == 0, waited.output
    assert f"{alert} skipped" in waited.output and f"{train} succeeded" in waited.output
    reason = live.store.get_job(alert).reason
    assert reason.startswith("dependency job default/prep")
    assert reason.endswith("ended succeeded; this job needed it failed")
    assert live.store.runs(alert) == []


def test_a_failed_job_still_fails_wait_while_its_dependent_is_skipped(live: LiveService) -> None:
    prep, train, alert = pipeline(live, "exit 3")
    waited = CliRunner().invoke(app, ["wait", prep, train, alert])
    assert waited.exit_code == 1, waited.output
    assert live.state(train).value == "skipped" and live.state(alert).value == "succeeded"
