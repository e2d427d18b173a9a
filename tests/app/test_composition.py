"""The composition root (``flotilla.app``) is what ``flotilla up`` runs: ``up`` builds its
service there from its flags, and a service built there from the same config runs a job
submitted through its API to success — so what the tests and benchmarks build through the
root is what a user starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import flotilla.app
import flotilla.server
from flotilla.app import (
    ApiConfig,
    Service,
    ServiceConfig,
    build_service,
)
from flotilla.backends.local.backend import LocalBackend
from flotilla.backends.sim import SimBackend
from flotilla.cli.main import app
from flotilla.model.fleet_loader import fleet_from_data
from flotilla.service.engines import ClusterEngine, unwrapped
from flotilla.service.fleet import fleet_change
from flotilla.service.loop import LoopSettings
from flotilla.store import SqlStore
from tests.timing import wait_until


def test_up_builds_its_service_through_the_root_from_its_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[Service] = []
    backends: dict[str, object] = {}  # as built (stop closes them)
    served: list[dict[str, Any]] = []
    build = flotilla.app.build_service

    def recording(config: ServiceConfig, **parts: Any) -> Service:
        built.append(build(config, **parts))
        backends.update(built[-1].backends)
        return built[-1]

    def fake_run_server(application: object, host: str, port: int, **options: Any) -> None:
        served.append({"app": application, **options})
        options["listener"].close()

    monkeypatch.setattr(flotilla.app, "build_service", recording)
    monkeypatch.setattr(flotilla.server, "run_server", fake_run_server)
    db = f"sqlite:///{tmp_path / 'flotilla.db'}"
    arguments = ["up", "--port", "0", "--db", db, "--state-dir", str(tmp_path / "state")]
    result = CliRunner().invoke(
        app, [*arguments, "--cycle-interval", "0.2", "--replica", "here", "--cluster", "box"]
    )
    assert result.exit_code == 0, result.output
    [service] = built
    assert served, "up did not serve the service it built"
    config = service.config
    assert (config.db, config.state_dir, config.cluster) == (db, tmp_path / "state", "box")
    assert (config.loop.cycle_interval, config.loop.replica) == (0.2, "here")
    assert config.api is not None and config.api.host == "127.0.0.1"
    assert set(backends) == {"box"} and isinstance(backends["box"], ClusterEngine)
    assert isinstance(unwrapped(backends["box"]), LocalBackend)  # at arm's length (engines.py)
    for line in service.notices:  # what the root says about what it built is what up prints
        assert line in result.output
    assert "cluster box: " in service.notices[0] and "every 0.2s" in service.notices[0]


def test_a_service_built_as_up_builds_it_runs_a_job_submitted_through_its_api(
    tmp_path: Path,
) -> None:
    config = ServiceConfig(  # what ``flotilla up --cycle-interval 0.05`` passes the root
        db=f"sqlite:///{tmp_path / 'flotilla.db'}",
        loop=LoopSettings(cycle_interval=0.05, replica="root"),
        state_dir=tmp_path / "state",
        api=ApiConfig(any_host=True, poll_interval=0.05),  # TestClient's Host: testserver
        secret_key_file=tmp_path / "secret.key",
    )
    with build_service(config) as service:
        service.start()
        with TestClient(service.app()) as api:
            job = {
                "name": "hello",
                "queue": "default",
                "tasks": [{"name": "main", "resources": {"cpu": 0.1}}],
                "payload": {"command": ["sh", "-c", "echo built by the root"]},
            }
            response = api.post("/v1/jobs", json=job)
            assert response.status_code == 201, response.text
            [job_id] = response.json()["ids"]
            wait_until(
                lambda: api.get(f"/v1/jobs/{job_id}").json()["state"] == "succeeded", "success"
            )
            logs = api.get(f"/v1/jobs/{job_id}/logs").json()
            assert logs["data"] == "built by the root\n"
            [cluster] = api.get("/v1/clusters").json()
            assert cluster["name"] == "local"


def test_stop_closes_what_the_root_built_and_leaves_what_it_was_handed(tmp_path: Path) -> None:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    backend = SimBackend(cluster="sim", nodes=[{"name": "n", "resources": {"cpu": 4}}])
    try:
        config = ServiceConfig(loop=LoopSettings(replica="handed"))
        service = build_service(config, store=store, backends={"sim": backend})
        assert store.get_cluster("sim").state == "ready"  # recorded from its inventory
        assert [queue.name for queue in store.list_queues()] == ["default"]
        service.loop.cycle()
        assert service.loop.is_leader
        service.stop()
        assert not service.loop.is_leader  # the lease released at stop
        assert store.list_queues()  # the store is still the test's, and open
    finally:
        backend.close()
        store.close()


@pytest.mark.parametrize(
    ("cluster", "problem"),
    [
        ({"backend": "no-such-engine"}, "no-such-engine"),
        (
            {"backend": "sim", "settings": {"startup_delay": {"env": "FLOTILLA_TEST_UNSET_9"}}},
            "environment variable FLOTILLA_TEST_UNSET_9 is not set",
        ),
    ],
)
def test_a_cluster_of_the_fleet_in_force_that_cannot_be_built_here_is_unreachable_not_fatal(
    tmp_path: Path, cluster: dict[str, Any], problem: str
) -> None:
    """Issue 35: a secret reference that no longer resolves at a restart stopped the whole
    service; docs/fleet.md promises the cluster is unreachable with its reason and the rest
    of the fleet goes on."""
    db = f"sqlite:///{tmp_path / 'flotilla.db'}"
    store = SqlStore.open(db)
    data = {
        "name": "test",
        "clusters": [
            {"name": "far", "nodes": [], **cluster},
            {"name": "near", "backend": "sim", "nodes": [{"name": "n", "resources": {"cpu": 4}}]},
        ],
        "queues": [{"name": "default"}],
    }
    try:
        store.apply_fleet(fleet_change(fleet_from_data(data)))
    finally:
        store.close()
    config = ServiceConfig(db=db, loop=LoopSettings(replica="x"), state_dir=tmp_path / "s")
    service = build_service(config)
    try:
        far = service.store.get_cluster("far")
        assert far.state == "unreachable"
        assert problem in (far.reason or "")
        assert any(line.startswith("cluster far (") and problem in line for line in service.notices)
        assert service.store.get_cluster("near").state == "ready"
    finally:
        service.stop()
