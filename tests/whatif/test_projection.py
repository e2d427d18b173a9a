"""The service's projection: each waiting job's estimated start in ``GET /v1/jobs/{id}`` and
``why``, with the projection's time and basis; the export as an admin route."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from flotilla.model.loader import scenario_from_data
from flotilla.model.scenario import RuntimeSource
from flotilla.server import AuthSettings, create_app
from flotilla.service import projection as projection_module
from flotilla.service.projection import Projection, ProjectionSettings
from flotilla.whatif.estimator import EstimatorMethod
from tests.timing import wait_until
from tests.whatif.test_export import Live


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    service = Live(tmp_path)
    yield service
    service.close()


def projection_of(live: Live, *methods: EstimatorMethod) -> Projection:
    settings = ProjectionSettings(in_process=True, methods=methods or (EstimatorMethod.AUTO,))
    return Projection(live.store, settings)


def test_a_waiting_job_shows_its_estimated_start_and_its_basis(live: Live) -> None:
    holder = live.submit("holder", "a", 4, max_runtime=2400)
    other = live.submit("other", "a", 4, max_runtime=2400)
    live.loop.cycle()
    waiting = live.submit("next", "a", 4, max_runtime=600)
    projection = projection_of(live)
    projection.refresh()
    app = create_app(live.store, live.loop, AuthSettings.disabled(), projection=projection)
    with TestClient(app) as client:
        detail = client.get(f"/v1/jobs/{waiting}").json()
        why = client.get(f"/v1/jobs/{waiting}/why").json()
        running = client.get(f"/v1/jobs/{holder}").json()
    estimate = detail["estimated_start"]
    assert estimate is not None and why["estimated_start"]["start"] == estimate["start"]
    projected_at = datetime.fromisoformat(estimate["projected_at"])
    start = datetime.fromisoformat(estimate["start"])
    assert (start - projected_at).total_seconds() == pytest.approx(2400, abs=2)
    assert estimate["runtime_source"] == "max_runtime"
    assert estimate["summary"].startswith("expected to start in about 40 min (projection of ")
    assert estimate["summary"].endswith("UTC; runtimes from max_runtime)")
    assert running["estimated_start"] is None  # only waiting jobs have one
    assert other


def test_a_waiting_job_without_an_estimate_says_why_from_the_moment_of_submit(
    live: Live,
) -> None:
    """No waiting job shows nothing (``squeue --start`` prints N/A and a reason): before the
    first projection, when submitted after the latest, when held, and with no projection."""
    live.submit("holder", "a", 4, max_runtime=2400)
    live.submit("other", "a", 4, max_runtime=2400)
    live.loop.cycle()
    early = live.submit("early", "a", 4, max_runtime=600)
    projection = projection_of(live)
    app = create_app(live.store, live.loop, AuthSettings.disabled(), projection=projection)
    with TestClient(app) as client:

        def unknown(job: str) -> str | None:
            detail = client.get(f"/v1/jobs/{job}").json()
            why = client.get(f"/v1/jobs/{job}/why").json()
            assert why["start_unknown"] == detail["start_unknown"]
            return detail["start_unknown"]  # type: ignore[no-any-return]

        assert unknown(early) == "unknown: not projected yet (the first projection is under way)"
        projection.refresh()
        assert unknown(early) is None  # it has its estimate now
        late = live.submit("late", "a", 4, max_runtime=600)
        assert unknown(late).startswith(
            "unknown: not projected yet (submitted after the projection of "
        )  # type: ignore[union-attr]
        live.store.hold_many([late], "wait for me")
        assert unknown(late) == "unknown: held, it starts only once released (flotilla release)"
    bare = create_app(live.store, live.loop, AuthSettings.disabled())
    with TestClient(bare) as client:
        detail = client.get(f"/v1/jobs/{early}").json()
    assert detail["start_unknown"].startswith("unknown: no projection runs beside this server")


def test_each_estimator_gives_its_own_projection(live: Live) -> None:
    live.submit("holder", "a", 4, max_runtime=1200)
    live.submit("other", "a", 4, max_runtime=1200)
    live.loop.cycle()
    waiting = live.submit("next", "a", 4)
    projection = projection_of(live, EstimatorMethod.AUTO, EstimatorMethod.MAX_RUNTIME)
    projection.refresh()
    found = projection.estimated_start(waiting)
    assert found is not None and found.start is not None
    assert found.others == {"max_runtime": found.start}


def test_the_export_route_is_for_admins_and_gives_a_valid_scenario(live: Live) -> None:
    live.submit("one", "a", 1)
    app = create_app(live.store, live.loop, AuthSettings.disabled())
    with TestClient(app) as client:
        answer = client.get("/v1/fleet/scenario", params={"runtimes": "history"})
        bad = client.get("/v1/fleet/scenario", params={"runtimes": "guess"})
    assert answer.status_code == 200
    assert [job.queue for job in scenario_from_data(answer.json()).jobs] == ["a"]
    assert bad.status_code == 422 and "runtimes" in bad.text


def test_the_background_projection_reads_and_simulates_in_a_child_process_and_stops(
    live: Live, tmp_path: Path
) -> None:
    live.submit("holder", "a", 4, max_runtime=600)
    live.submit("other", "a", 4, max_runtime=600)
    live.loop.cycle()
    waiting = live.submit("next", "a", 4, max_runtime=600)
    projection = Projection(
        live.store,
        ProjectionSettings(interval=3600, min_gap=0.05),
        database=f"sqlite:///{tmp_path / 'flotilla.db'}",
    )
    projection.start()
    try:
        wait_until(
            lambda: projection.estimated_start(waiting) is not None, "a projection", 60, 0.05
        )
    finally:
        projection.stop()
    found = projection.estimated_start(waiting)
    assert found is not None and found.start is not None
    assert (found.start - found.projected_at).total_seconds() == pytest.approx(600, abs=2)
    assert found.runtime.source is RuntimeSource.MAX_RUNTIME
    assert projection._child is None  # stopped with the projection


def test_up_refuses_an_unknown_estimator_before_anything_starts(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from flotilla.cli.main import app

    db = tmp_path / "db" / "flotilla.db"
    args = ["up", "--port", "0", "--db", f"sqlite:///{db}", "--state-dir", str(tmp_path / "s")]
    result = CliRunner().invoke(app, [*args, "--projection-runtimes", "auto,guess"])
    assert result.exit_code == 2
    assert "--projection-runtimes: 'auto,guess': give auto, max_runtime or history" in result.output
    assert not db.parent.exists()


@pytest.mark.timing  # a stop racing a worker's start: failed beside parity replays, loaded
def test_a_projection_stopped_while_its_worker_is_being_started_ends_that_worker_at_once(
    live: Live, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flotilla up`` stopped soon after it started: its first worker (slow to import the
    engine on a busy machine) was made after ``stop`` had looked for one, so nothing ended it
    and the stop waited out the join's and the worker's timeouts (40 s) before killing it."""
    live.submit("waiting", "a", 8)
    real_popen = subprocess.Popen
    made: list[subprocess.Popen[str]] = []
    projection = Projection(
        live.store,
        ProjectionSettings(interval=3600, min_gap=0.05),
        database=f"sqlite:///{tmp_path / 'flotilla.db'}",
    )

    def made_as_stop_begins(args: list[str], **options: Any) -> subprocess.Popen[str]:
        # A worker that never answers, handed over only once stop() has begun.
        child = real_popen([sys.executable, "-c", "import time; time.sleep(600)"], **options)
        made.append(child)
        projection._stop.wait()
        return child

    monkeypatch.setattr(projection_module.subprocess, "Popen", made_as_stop_begins)
    projection.start()
    wait_until(lambda: bool(made), "the worker to be started")
    projection.stop()
    [worker] = made
    assert worker.returncode == -signal.SIGTERM  # ended at once, not killed after a wait


SERVICE_WITH_A_PROJECTION = """
import sys, time
from flotilla.service.projection import Projection, ProjectionSettings
from flotilla.store import SqlStore

url = sys.argv[1]
projection = Projection(SqlStore.open(url), ProjectionSettings(interval=3600), database=url)
projection.start()
while projection._child is None:
    time.sleep(0.01)
print(projection._child.pid, flush=True)
time.sleep(3600)
"""


def test_a_kill_9_of_the_service_ends_its_projection_worker_too(tmp_path: Path) -> None:
    """The worker is stopped (as one still importing the engine on a busy machine is, in
    effect: it never reads the end of its input); the service is then killed with SIGKILL.
    The kernel ends the worker with it; before, it stayed behind for good."""
    service = subprocess.Popen(
        [sys.executable, "-c", SERVICE_WITH_A_PROJECTION, f"sqlite:///{tmp_path / 'f.db'}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert service.stdout is not None
    worker = int(service.stdout.readline())
    os.kill(worker, signal.SIGSTOP)
    service.kill()
    service.wait()

    def gone() -> bool:
        try:
            with open(f"/proc/{worker}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    try:
        wait_until(gone, "the stopped projection worker to end with its service", 30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)
