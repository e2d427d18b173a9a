"""``PUT /v1/fleet`` and ``GET /v1/fleet`` (and the CLI over them): validated first, all or
nothing, admin-only; secrets stay references — never stored, returned or printed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from flotilla.model import JobSpec
from flotilla.server import AuthSettings, create_app
from flotilla.server.auth import token_hash
from flotilla.store import SqlStore
from tests.fleet.support import FakeEngine, FleetService, factory_with, fleet_data, sim_cluster
from tests.server.api_support import FakeScheduler

AUTH = {
    "users": [
        {"name": "ops", "token_sha256": token_hash("ops-token"), "admin": True},
        {"name": "ana", "token_sha256": token_hash("ana-token"), "queues": {"*": ["submit"]}},
    ]
}
OPS = {"Authorization": "Bearer ops-token"}
ANA = {"Authorization": "Bearer ana-token"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    opened = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    yield opened
    opened.close()


@pytest.fixture
def api(store: SqlStore) -> TestClient:
    auth = AuthSettings.from_data(AUTH)
    return TestClient(create_app(store, FakeScheduler(), auth, poll_interval=0))


def two_clusters(**extra: Any) -> dict[str, Any]:
    return fleet_data(
        sim_cluster("east"),
        sim_cluster("west", labels={"region": "west"}),
        queues=[{"name": "a"}, {"name": "b", "weight": 2}],
        **extra,
    )


def test_apply_then_show_the_fleet_in_force(api: TestClient, store: SqlStore) -> None:
    applied = api.put("/v1/fleet", json=two_clusters(), headers=OPS)
    assert applied.status_code == 200, applied.text
    assert applied.json()["version"] == 1
    shown = api.get("/v1/fleet", headers=OPS).json()
    assert [c["name"] for c in shown["fleet"]["clusters"]] == ["east", "west"]
    assert {q.name: q.weight for q in store.list_queues()} == {"a": 1.0, "b": 2.0}
    assert {c.name: c.state for c in store.list_clusters()} == {
        "east": "unreachable",  # until its backend answers a scheduler
        "west": "unreachable",
    }
    again = api.put("/v1/fleet", json=fleet_data(sim_cluster("east")), headers=OPS)
    assert again.status_code == 200 and again.json()["version"] == 2
    assert [c.name for c in store.list_clusters()] == ["east"]
    assert [q.name for q in store.list_queues()] == ["default"]


def test_the_fleet_is_admin_only(api: TestClient) -> None:
    assert api.put("/v1/fleet", json=two_clusters(), headers=ANA).status_code == 403
    assert api.get("/v1/fleet", headers=ANA).status_code == 403
    assert api.get("/v1/fleet").status_code == 401
    assert api.get("/v1/fleet", headers=OPS).status_code == 404  # nothing applied yet


def test_an_invalid_fleet_names_every_field_and_changes_nothing(
    api: TestClient, store: SqlStore
) -> None:
    assert api.put("/v1/fleet", json=two_clusters(), headers=OPS).status_code == 200
    bad = two_clusters()
    bad["clusters"][0]["backend"] = "ray-not-installed"
    bad["clusters"][1]["settings"] = {"no_such_setting": 1}
    bad["queues"][0]["wieght"] = 3
    refused = api.put("/v1/fleet", json=bad, headers=OPS)
    assert refused.status_code == 422
    assert refused.json()["problems"] == ["queues[0].wieght: unknown field"]
    del bad["queues"][0]["wieght"]
    refused = api.put("/v1/fleet", json=bad, headers=OPS)
    assert refused.status_code == 422
    problems = refused.json()["problems"]
    assert problems[0].startswith("clusters[0].backend: unknown backend 'ray-not-installed'")
    assert "installed: local, sim" in problems[0] or "local" in problems[0]
    assert problems[1] == "clusters[1].settings.no_such_setting: not a setting of the sim backend"
    assert api.get("/v1/fleet", headers=OPS).json()["version"] == 1


def test_removing_a_queue_with_jobs_refuses_the_whole_apply(
    api: TestClient, store: SqlStore
) -> None:
    assert api.put("/v1/fleet", json=two_clusters(), headers=OPS).status_code == 200
    store.submit_jobs(
        [
            JobSpec.model_validate(
                {"name": "j", "queue": "b", "tasks": [{"name": "t", "resources": {"cpu": 1}}]}
            )
        ]
    )
    change = two_clusters(assignment_strategy="cost-optimized")
    change["queues"] = [{"name": "a"}, {"name": "c"}]
    refused = api.put("/v1/fleet", json=change, headers=OPS)
    assert refused.status_code == 409
    assert refused.json()["problems"] == [
        "queues: queue 'b' has 1 unfinished job(s); keep it in the file until they end "
        "(finished jobs keep its name in their history)"
    ]
    assert [q.name for q in store.list_queues()] == ["a", "b"]  # nothing half-written
    assert "settings" not in api.get("/v1/fleet", headers=OPS).json()["fleet"] or (
        api.get("/v1/fleet", headers=OPS).json()["fleet"]["settings"].get("assignment_strategy")
        != "cost-optimized"
    )


def test_an_apply_against_a_stale_version_is_a_conflict(api: TestClient) -> None:
    assert api.put("/v1/fleet", json=two_clusters(), headers=OPS).status_code == 200
    changed = two_clusters(cycle_interval=2)
    assert api.put("/v1/fleet", json=changed, headers=OPS).status_code == 200
    stale = api.put("/v1/fleet?expected_version=1", json=two_clusters(), headers=OPS)
    assert stale.status_code == 409
    assert "version 2, expected 1" in stale.json()["problems"][0]


def test_secrets_are_resolved_for_the_backend_but_never_stored_or_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "tok-3f9a8c7e-never-print-me"
    secret_file = tmp_path / "password"
    secret_file.write_text("file-secret-0d1e2f\n")
    monkeypatch.setenv("ENGINE_TOKEN", secret)
    seen: dict[str, Any] = {}
    engine = FakeEngine()
    build = factory_with(engine)

    def recording(name: str, **settings: Any) -> Any:
        seen.update(settings)
        return build(name, cluster=settings["cluster"])

    db = tmp_path / "flotilla.db"
    service = FleetService(f"sqlite:///{db}", factory=recording)
    try:
        remote = {
            "name": "remote",
            "backend": "fake-remote",
            "settings": {
                "address": "http://engine:8265",
                "token": {"env": "ENGINE_TOKEN"},
                "password": {"file": str(secret_file)},
            },
        }
        service.apply(fleet_data(remote))
        loop = service.start()
        loop.cycle()
        assert seen["token"] == secret and seen["password"] == "file-secret-0d1e2f"
        api = service.api()
        shown = api.get("/v1/fleet")
        assert shown.status_code == 200
        settings = shown.json()["fleet"]["clusters"][0]["settings"]
        assert settings["token"] == {"env": "ENGINE_TOKEN"}
        assert settings["password"] == {"file": str(secret_file)}
        for response in (shown, api.get("/v1/clusters"), api.get("/metrics")):
            assert secret not in response.text and "file-secret" not in response.text
    finally:
        service.close()
    stored = b"".join(path.read_bytes() for path in tmp_path.glob("flotilla.db*"))
    assert secret.encode() not in stored and b"file-secret" not in stored


def test_an_unresolvable_secret_reference_names_its_field(api: TestClient) -> None:
    fleet = fleet_data(
        {"name": "c", "backend": "sim", "settings": {"startup_delay": {"env": "NOT_SET_1234"}}}
    )
    refused = api.put("/v1/fleet", json=fleet, headers=OPS)
    assert refused.status_code == 422
    assert refused.json()["problems"] == [
        "clusters[0].settings.startup_delay: environment variable NOT_SET_1234 is not set"
    ]


def test_the_cli_applies_and_shows_the_fleet(
    store: SqlStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from flotilla.cli import client as cli_client
    from flotilla.cli.main import app

    application = create_app(store, FakeScheduler(), AuthSettings.from_data(AUTH))
    monkeypatch.setattr(
        cli_client,
        "client_factory",
        lambda server, token: TestClient(application, base_url=server, headers=OPS),
    )
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(two_clusters()))
    runner = CliRunner()
    applied = runner.invoke(app, ["fleet", "apply", str(path)])
    assert applied.exit_code == 0, applied.output
    assert "version 1 in force: clusters east, west" in applied.output
    shown = runner.invoke(app, ["fleet", "show"])
    assert shown.exit_code == 0, shown.output
    assert yaml.safe_load(shown.output)["clusters"][1]["labels"] == {"region": "west"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters: [{name: x, backend: sim, nodez: []}]\nqueues: [{name: q}]\n")
    refused = runner.invoke(app, ["fleet", "apply", str(bad)], env={"COLUMNS": "300"})
    assert refused.exit_code == 2
    assert "clusters[0].nodez: unknown field" in refused.output


def test_the_version_counts_changes_not_applies(api: TestClient) -> None:
    """Restarting with an unchanged fleet file (or applying it again) kept bumping the
    version; replicas reload and `fleet show` says "applied" only when something changed."""
    first = api.put("/v1/fleet", json=two_clusters(), headers=OPS).json()
    again = api.put("/v1/fleet", json=two_clusters(), headers=OPS).json()
    assert (first["version"], again["version"]) == (1, 1)
    assert again["applied_at"] == first["applied_at"]
    changed = api.put("/v1/fleet", json=two_clusters(cycle_interval=2), headers=OPS).json()
    assert changed["version"] == 2
    stale = api.put("/v1/fleet", json=two_clusters(), headers=OPS, params={"expected_version": 1})
    assert stale.status_code == 409  # an unchanged document is still checked against it


def test_fleet_show_prints_quantities_in_a_files_units(
    store: SqlStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from flotilla.cli import client as cli_client
    from flotilla.cli.main import app

    application = create_app(store, FakeScheduler(), AuthSettings.from_data(AUTH))
    monkeypatch.setattr(
        cli_client,
        "client_factory",
        lambda server, token: TestClient(application, base_url=server, headers=OPS),
    )
    fleet = fleet_data(
        {
            "name": "big",
            "backend": "sim",
            "nodes": [{"name": "n", "resources": {"cpu": 16, "memory": "4Gi"}}],
        },
        queues=[{"name": "a"}],
    )
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    runner = CliRunner()
    assert runner.invoke(app, ["fleet", "apply", str(path)]).exit_code == 0
    shown = runner.invoke(app, ["fleet", "show"])
    assert shown.exit_code == 0, shown.output
    assert "4294967296" not in shown.output and "16.0" not in shown.output
    node = yaml.safe_load(shown.output)["clusters"][0]["nodes"][0]
    assert node["resources"] == {"cpu": 16, "memory": "4Gi"}


def test_a_queue_whose_jobs_all_ended_may_be_left_out_of_the_next_fleet(
    api: TestClient, store: SqlStore
) -> None:
    """Following the README in order ended in a 409: a queue that ever held a job could never
    be removed."""
    assert api.put("/v1/fleet", json=two_clusters(), headers=OPS).status_code == 200
    spec = {"name": "j", "queue": "b", "tasks": [{"name": "t", "resources": {"cpu": 1}}]}
    (job,) = store.submit_jobs([JobSpec.model_validate(spec)])
    store.cancel(job, "done with it")
    change = two_clusters()
    change["queues"] = [{"name": "a"}]
    applied = api.put("/v1/fleet", json=change, headers=OPS)
    assert applied.status_code == 200, applied.text
    assert [q.name for q in store.list_queues()] == ["a"]
    assert store.get_job(job).queue == "b"
