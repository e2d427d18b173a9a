"""``flotilla hold`` / ``release`` and the SDK's and API's hold and release, against a real
service in the test process (real API app, loop, SQLite and local processes)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from flotilla.sdk import Client
from tests.cli.live_cli import run
from tests.live_service import LiveService


def gated(live: LiveService, gate: Path) -> tuple[str, str]:
    """A running job that ends when ``gate`` exists, and a queued job that waits for it."""
    first = live.submit("gate", f"while [ ! -e {gate} ]; do sleep 0.05; done")
    spec = live.spec("after", "echo after")
    spec["depends_on"] = [{"job": first}]
    response = TestClient(live.app).post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    return first, response.json()["ids"][0]


def test_hold_keeps_a_queued_job_from_starting_and_release_lets_it_run(
    live: LiveService, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    first, after = gated(live, gate)
    held = run("hold", after[:8], "--reason", "not yet")
    assert held.exit_code == 0, held.output
    assert f"{after[:8]} after: held" in held.output
    why = run("why", after)
    assert "is held (not yet): flotilla release" in why.output, why.output
    gate.touch()
    live.wait_until(lambda: live.state(first).value == "succeeded", "the gate job to end")
    cycles = live.loop.last_cycle().number
    live.wait_until(lambda: live.loop.last_cycle().number > cycles + 3, "three more cycles")
    assert live.state(after).value == "held"
    released = run("release", after)
    assert released.exit_code == 0 and "after: queued" in released.output, released.output
    waited = run("wait", after)
    assert waited.exit_code == 0, waited.output


def test_holding_a_running_job_is_refused_naming_its_state(
    live: LiveService, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    first, _ = gated(live, gate)
    live.wait_until(lambda: live.state(first).value == "running", "the job to run")
    refused = run("hold", first)
    assert refused.exit_code == 1
    assert f"job {first} is running: only a queued job can be held" in refused.output
    gate.touch()


def test_the_sdk_holds_and_releases(live: LiveService, tmp_path: Path) -> None:
    _, after = gated(live, tmp_path / "gate")
    with Client("http://testserver", http=TestClient(live.app)) as client:
        assert client.hold(after).state == "held"
        assert client.get(after).reason.startswith("held by ")
        assert client.release(after, "go").state == "queued"
