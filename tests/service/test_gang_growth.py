"""A non-strict gang grows in the service: a 4-replica job with ``min_member: 2`` starts with
the 2 replicas that fit and grows to 4 as room appears, on the run it started with; while it
waits, the scheduler says how many replicas are placed and why the rest wait. Real store
(SQLite), the ``sim`` backend (``test_local_gang_growth.py`` runs the same on processes)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from flotilla.backends.interface import (
    BackendUnavailable,
    DispatchRequest,
    DispatchResult,
    StatusRequest,
)
from flotilla.backends.sim import SimBackend
from flotilla.cli import client as cli_client
from flotilla.cli import main as cli_main
from flotilla.model import JobSpec, QueueSpec
from flotilla.model.scenario import Mode
from flotilla.server import AuthSettings, create_app
from flotilla.service.records import cluster_spec_from_inventory
from flotilla.store import JobState, SqlStore
from tests.service_builders import loop_over
from tests.timing import wait_until

NODES = [{"name": "n", "count": 4, "resources": {"cpu": 8}}]


class SimService:
    def __init__(self, root: Path, mode: Mode = Mode.SYNC, engine: str = "sim") -> None:
        self.store = SqlStore.open(f"sqlite:///{root / 'flotilla.db'}")
        self.store.put_queue(QueueSpec(name="default"))
        self.backend = SimBackend(cluster="sim", nodes=NODES, default_duration=3600.0)
        nodes = self.backend.inventory().nodes
        # ``engine``: the backend the store records for the cluster (what decides growth)
        self.store.upsert_cluster(cluster_spec_from_inventory("sim", engine, nodes))
        self.loop = loop_over(
            self.store,
            {"sim": self.backend},
            register=False,  # recorded above, as ``engine``
            replica="test",
            cycle_interval=0.05,
            mode=mode,
        )

    def submit(self, name: str, replicas: int, **fields: Any) -> str:
        spec = {
            "name": name,
            "queue": "default",
            "tasks": [{"name": "worker", "replicas": replicas, "resources": {"cpu": 8}}],
            "payload": {"sim": {"duration": 3600}},
            **fields,
        }
        return self.store.submit_jobs([JobSpec.model_validate(spec)])[0]

    def placed(self, job_id: str) -> int:
        run = self.store.get_job(job_id).run
        return 0 if run is None else len(run.assignment["placements"])

    def cycle_until(self, done: Callable[[], bool], limit: float = 30.0) -> None:
        wait_until(done, "the loop to get there", limit, 0.02, self.loop.cycle)

    def close(self) -> None:
        self.loop.close()
        self.backend.close()
        self.store.close()


@pytest.fixture(params=[Mode.SYNC, Mode.ASYNC], ids=["sync", "async"])
def service(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SimService]:
    running = SimService(tmp_path, request.param)
    yield running
    running.close()


NON_STRICT = {"gang": {"mode": "non-strict", "min_member": 2}}


def test_a_non_strict_gang_starts_with_what_fits_and_grows_to_full_size(
    service: SimService,
) -> None:
    blocker = service.submit("blocker", 2)
    service.cycle_until(lambda: service.store.get_job(blocker).state is JobState.RUNNING)
    gang = service.submit("train", 4, **NON_STRICT)
    service.cycle_until(lambda: service.store.get_job(gang).state is JobState.RUNNING)
    service.loop.cycle()
    assert service.placed(gang) == 2
    waiting = service.loop.pending_reason(gang) or ""
    assert waiting.startswith("2 of 4 replicas placed; the rest wait: "), waiting

    service.store.cancel(blocker, "make room")
    service.cycle_until(lambda: service.placed(gang) == 4)
    job = service.store.get_job(gang)
    assert job.state is JobState.RUNNING and job.run is not None
    assert len(service.store.runs(gang)) == 1  # the same run, grown
    nodes = {placement["node"] for placement in job.run.assignment["placements"]}
    assert len(nodes) == 4  # one replica per node, none placed twice
    status = service.backend.status(StatusRequest(job.run.id))
    assert sorted((r.task, r.replica) for r in status.replicas) == [("worker", i) for i in range(4)]
    grown = [event for event in service.store.events(gang) if event.kind == "expanded"]
    assert [event.reason for event in grown] == ["grew by 2 replicas to 4 of 4 on sim"]
    service.loop.cycle()
    assert service.loop.pending_reason(gang) is None


def test_the_grown_replicas_hold_their_nodes_for_the_next_jobs(service: SimService) -> None:
    """After growing, the gang's new nodes count as used: a job that needs a whole node waits."""
    blocker = service.submit("blocker", 2)
    service.cycle_until(lambda: service.store.get_job(blocker).state is JobState.RUNNING)
    gang = service.submit("train", 4, **NON_STRICT)
    service.cycle_until(lambda: service.placed(gang) == 2)
    service.store.cancel(blocker, "make room")
    service.cycle_until(lambda: service.placed(gang) == 4)
    late = service.submit("late", 1)
    for _ in range(5):
        service.loop.cycle()
    assert service.store.get_job(late).state is JobState.QUEUED


def test_describe_shows_the_replicas_placed_and_why_the_rest_wait(
    service: SimService, monkeypatch: pytest.MonkeyPatch
) -> None:
    application = create_app(service.store, service.loop, AuthSettings.disabled(), poll_interval=0)

    def factory(server: str, token: str | None) -> httpx.Client:
        return TestClient(application, base_url=server)

    monkeypatch.setattr(cli_client, "client_factory", factory)
    blocker = service.submit("blocker", 2)
    service.cycle_until(lambda: service.store.get_job(blocker).state is JobState.RUNNING)
    gang = service.submit("train", 4, **NON_STRICT)
    service.cycle_until(lambda: service.placed(gang) == 2)
    service.loop.cycle()
    members = TestClient(application).get(f"/v1/jobs/{gang}").json()["members"]
    assert (members["placed"], members["wanted"]) == (2, 4)
    assert members["waiting"].startswith("2 of 4 replicas placed; the rest wait: ")
    why = TestClient(application).get(f"/v1/jobs/{gang}/why").json()
    assert why["reason"] == members["waiting"]
    assert why["summary"].startswith("job train is running on cluster sim: 2 of 4 replicas")
    described = CliRunner().invoke(cli_main.app, ["describe", gang])
    assert described.exit_code == 0, described.output
    assert "2 of 4 placed" in described.output
    assert "the rest wait" in described.output
    service.store.cancel(blocker, "make room")
    service.cycle_until(lambda: service.placed(gang) == 4)
    members = TestClient(application).get(f"/v1/jobs/{gang}").json()["members"]
    assert members == {"placed": 4, "wanted": 4, "waiting": None}


def test_a_growth_the_backend_could_not_take_is_handed_over_again(
    service: SimService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The growth is recorded before the backend is asked; an engine that cannot be reached
    then gets it at the next commit (as a new term would: ``Growth.repair``)."""
    blocker = service.submit("blocker", 2)
    service.cycle_until(lambda: service.store.get_job(blocker).state is JobState.RUNNING)
    gang = service.submit("train", 4, **NON_STRICT)
    service.cycle_until(lambda: service.placed(gang) == 2)
    grow = service.backend.add_replicas
    refused: list[str] = []

    def unreachable(request: DispatchRequest) -> DispatchResult:
        refused.append(request.run_id)
        raise BackendUnavailable("the engine is down")

    monkeypatch.setattr(service.backend, "add_replicas", unreachable)
    service.store.cancel(blocker, "make room")
    service.cycle_until(lambda: service.placed(gang) == 4)  # recorded
    assert refused
    run = service.store.get_job(gang).run
    assert run is not None
    assert len(service.backend.status(StatusRequest(run.id)).replicas) == 2
    monkeypatch.setattr(service.backend, "add_replicas", grow)
    service.cycle_until(lambda: len(service.backend.status(StatusRequest(run.id)).replicas) == 4)


def test_on_a_cluster_whose_backend_cannot_grow_the_gang_keeps_its_replicas_and_says_why(
    tmp_path: Path,
) -> None:
    """The engine does not place the rest where they could never join (no room is held for
    them), and the job's reason says why they wait."""
    service = SimService(tmp_path, engine="slurm")
    try:
        blocker = service.submit("blocker", 2)
        service.cycle_until(lambda: service.store.get_job(blocker).state is JobState.RUNNING)
        gang = service.submit("train", 4, **NON_STRICT)
        service.cycle_until(lambda: service.placed(gang) == 2)
        service.store.cancel(blocker, "make room")
        service.cycle_until(lambda: service.store.get_job(blocker).state is JobState.CANCELLED)
        late = service.submit("late", 2)
        service.cycle_until(lambda: service.store.get_job(late).state is JobState.RUNNING)
        assert service.placed(gang) == 2
        reason = service.loop.pending_reason(gang) or ""
        assert reason == (
            "2 of 4 replicas placed; the rest wait: cluster sim's backend cannot add replicas "
            "to a running run"
        )
    finally:
        service.close()
