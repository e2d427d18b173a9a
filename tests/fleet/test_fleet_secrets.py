"""Secrets stay secret (issue 23, item 8): a fleet secret reference's value never appears in
a log, an error or a response, including the parse error of the setting it feeds; a cluster
whose settings cannot be resolved is ``unreachable`` with a reason, said once, and no job is
leased to it.

The reproduction: ``{file: /etc/shadow}`` on a numeric setting. The backend was built with
the file's text where it takes a number, failed every cycle with the text in its error, and
the cluster stayed ``ready`` while jobs leased to it hung."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from flotilla.backends import BackendUnavailable, Inventory
from flotilla.model.fleet import FleetCluster
from flotilla.server import AuthSettings, create_app
from flotilla.service.fleet_settings import resolve
from flotilla.store import JobState, SqlStore
from flotilla.web import mount_dashboard
from tests.fleet.support import FleetService, fleet_data, job, sim_cluster, sqlite_url

SHADOW = (
    "root:$6$DISTINCTIVE-SALT$DISTINCTIVE-HASH-VALUE:19000:0:99999:7:::\n"
    "daemon:*:DISTINCTIVE-SECOND-LINE:0:99999:7:::\n"
)
FRAGMENTS = ("DISTINCTIVE", "root:$6$", "daemon:*")


def leaked(text: str) -> list[str]:
    return [fragment for fragment in FRAGMENTS if fragment in text]


@pytest.fixture
def shadow(tmp_path: Path) -> Path:
    path = tmp_path / "shadow"
    path.write_text(SHADOW)
    path.chmod(0o600)
    return path


def test_a_secret_on_a_numeric_setting_leaks_nowhere_and_the_cluster_is_unreachable(
    tmp_path: Path, shadow: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    service = FleetService(sqlite_url(tmp_path))
    try:
        service.apply(fleet_data(sim_cluster("c1")))
        service.start()
        service.cycles(2)
        assert service.store.get_cluster("c1").state == "ready"

        reference = {"default_duration": {"file": str(shadow)}}
        service.apply(fleet_data(sim_cluster("c1", settings=reference)))
        [waiting] = service.submit(job("waits", 1))
        service.cycles(20)

        assert service.store.get_cluster("c1").state == "unreachable"
        assert service.state(waiting) is JobState.QUEUED  # never leased to it
        assert service.cluster_of(waiting) is None
        problem = service.runtime.problems["c1"]
        assert problem.startswith("clusters[0].settings.default_duration: secret file ")
        assert "does not hold a number" in problem and str(shadow) in problem

        said = [r for r in caplog.records if "cannot build its backend" in r.getMessage()]
        assert len(said) == 1, [r.getMessage() for r in said]  # once, not every cycle
        assert leaked(caplog.text) == []

        api = service.api()  # its clusters' problems shown as their reasons
        [cluster] = api.get("/v1/clusters").json()
        assert cluster["state"] == "unreachable"
        assert cluster["reason"] == problem
        for path in ("/v1/clusters", "/v1/fleet", f"/v1/jobs/{waiting}/why", "/metrics"):
            response = api.get(path)
            assert response.status_code == 200 and leaked(response.text) == [], path
        assert api.get("/v1/fleet").json()["fleet"]["clusters"][0]["settings"] == reference
    finally:
        service.close()


def test_the_reason_is_shown_by_an_api_of_another_process_and_cleared_when_fixed(
    tmp_path: Path, shadow: Path
) -> None:
    """A ``flotilla serve`` over the same database (a store and app of its own, no scheduler)
    showed ``reason: null``: the reason lived in the scheduler's memory only."""
    service = FleetService(sqlite_url(tmp_path))
    serve = SqlStore.open(sqlite_url(tmp_path))
    try:
        service.apply(fleet_data(sim_cluster("c1")))
        service.start()
        service.cycles(2)
        reference = {"default_duration": {"file": str(shadow)}}
        service.apply(fleet_data(sim_cluster("c1", settings=reference)))
        service.cycles(3)
        problem = service.runtime.problems["c1"]

        api = TestClient(mount_dashboard(create_app(serve, None, AuthSettings.disabled())))
        [cluster] = api.get("/v1/clusters").json()
        assert (cluster["state"], cluster["reason"]) == ("unreachable", problem)
        [row] = api.get("/ui/api/fleet").json()["clusters"]
        assert row["reason"] == problem
        assert leaked(api.get("/v1/clusters").text) == []

        service.apply(fleet_data(sim_cluster("c1")))
        service.cycles(3)
        [cluster] = api.get("/v1/clusters").json()
        assert (cluster["state"], cluster["reason"]) == ("ready", None)
    finally:
        serve.close()
        service.close()


def test_a_secret_a_backend_quotes_in_its_own_error_is_hidden_in_every_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Defence in depth: a backend that puts a setting in its error (here every cycle)."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("LEAKY_TOKEN", "tok-DISTINCTIVE-0123456789")

    class Leaky:
        name = "leaky"

        def __init__(self, cluster: str, token: str) -> None:
            self.cluster, self.token = cluster, token

        def inventory(self) -> Inventory:
            raise BackendUnavailable(f"https://engine refused token {self.token!r}")

        def poll(self) -> list[Any]:
            raise BackendUnavailable(f"https://engine refused token {self.token!r}")

        def close(self) -> None:
            pass

    def factory(name: str, **settings: Any) -> Any:
        return Leaky(**settings)

    service = FleetService(sqlite_url(tmp_path), factory=factory)
    try:
        cluster = sim_cluster("c1", backend="leaky", settings={"token": {"env": "LEAKY_TOKEN"}})
        service.apply(fleet_data(cluster))
        service.start()
        service.cycles(5)
        assert "refused token" in caplog.text  # the backend's message is there ...
        assert leaked(caplog.text) == []  # ... without the token
        assert "(hidden)" in caplog.text
    finally:
        service.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("3", 3), (" 3\n", 3), ("2.5", None), ("root:$6$DISTINCTIVE", None), ("1e999", None)],
)
def test_a_secret_fed_setting_takes_the_type_the_backend_declares(
    monkeypatch: pytest.MonkeyPatch, text: str, expected: int | None
) -> None:
    monkeypatch.setenv("GPUS", text)
    from flotilla.backends import backend_factory

    cluster = FleetCluster(name="here", backend="local", settings={"gpus": {"env": "GPUS"}})
    resolved = resolve(cluster, 2, factory=backend_factory("local"))
    if expected is not None:
        assert (resolved.values, resolved.problems) == ({"gpus": expected}, [])
        return
    assert resolved.values == {}
    assert resolved.problems == [
        "clusters[2].settings.gpus: environment variable GPUS does not hold a whole number, "
        "which this setting takes (its content is not shown)"
    ]
    assert resolved.scrub(f"error: {text!r}") in ("error: '(hidden)'", f"error: {text!r}")


def test_applying_a_secret_that_does_not_fit_its_setting_is_a_422_without_its_value(
    tmp_path: Path, shadow: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    service = FleetService(sqlite_url(tmp_path))
    try:
        api = TestClient(create_app(service.store, None, AuthSettings.disabled()))
        settings = {"grace_period": {"file": str(shadow)}, "startup_delay": {"env": "NOT_SET_X"}}
        response = api.put("/v1/fleet", json=fleet_data(sim_cluster("c1", settings=settings)))
        assert response.status_code == 422, response.text
        assert response.json()["problems"] == [
            f"clusters[0].settings.grace_period: secret file {shadow} does not hold a number, "
            "which this setting takes (its content is not shown)",
            "clusters[0].settings.startup_delay: environment variable NOT_SET_X is not set",
        ]
        assert leaked(response.text) == [] and leaked(caplog.text) == []
        assert service.store.get_fleet() is None
    finally:
        service.close()


def test_a_secret_cannot_name_a_local_node(tmp_path: Path, shadow: Path) -> None:
    """Issue 35: ``node_name: {file: …}`` put the file's text in the node list (API), the
    logs and every job's environment. A setting the backend shows is refused as a secret,
    naming the field, at apply and at start alike, without the value."""
    from flotilla.model.fleet_loader import fleet_from_data
    from flotilla.service.fleet import check_fleet

    data = fleet_data(sim_cluster("c1"))
    data["clusters"][0] = {
        "name": "here",
        "backend": "local",
        "settings": {"node_name": {"file": str(shadow)}, "state_dir": str(tmp_path / "s")},
    }
    problems = check_fleet(fleet_from_data(data), local_state_dir=tmp_path / "s")
    assert problems == [
        "clusters[0].settings.node_name: this setting is shown (node lists, logs, jobs' "
        "environments), so it cannot be a secret reference: give its value"
    ]
    assert not leaked("\n".join(problems))
