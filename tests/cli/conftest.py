"""Fixtures of the client-command tests, reached by the CLI through ``client_factory`` without
a socket: ``servers``, the real API app (and dashboard routes, as `flotilla up` and `serve`
mount them) over a SQLite store and a fake scheduler, for the client's own behaviour; ``live``,
a real service in the test process (``tests/live_service.py``), for what the service does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

import flotilla.server
from flotilla.cli import client as cli_client
from flotilla.model import QueueSpec, QuotaSpec
from flotilla.server import AuthSettings, create_app
from flotilla.store import SqlStore
from flotilla.web import mount_dashboard
from tests.live_service import LiveService, live_service
from tests.server.api_support import FakeScheduler


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    store = SqlStore.open(f"sqlite:///{tmp_path}/flotilla.db")
    store.put_quota(QuotaSpec(name="org", min={"gpu": 8}, children=[QuotaSpec(name="vision")]))
    store.put_queue(QueueSpec(name="team-a", quota="vision"))
    store.put_queue(QueueSpec(name="team-b"))
    yield store
    store.close()


@pytest.fixture
def scheduler() -> FakeScheduler:
    return FakeScheduler()


@pytest.fixture
def servers(
    store: SqlStore, scheduler: FakeScheduler, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """Point the CLI's client factory at the app; returns the server URLs it was asked for."""
    application = create_app(store, scheduler, AuthSettings.disabled(), poll_interval=0)
    mount_dashboard(application)  # as `flotilla up` and `serve` do: `quotas` reads its usage
    asked: list[str] = []

    def factory(server: str, token: str | None) -> httpx.Client:
        asked.append(server)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return TestClient(application, base_url=server, headers=headers)

    monkeypatch.setattr(cli_client, "client_factory", factory)
    return asked


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveService]:
    """A real service (API app, loop, SQLite, local processes) the CLI's commands reach."""
    with live_service(tmp_path) as service:

        def factory(server: str, token: str | None) -> httpx.Client:
            return TestClient(service.app, base_url=server)

        monkeypatch.setattr(cli_client, "client_factory", factory)
        yield service


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Replace the server loop: ``up``/``serve`` do everything else, then return at once."""
    calls: list[dict[str, Any]] = []

    def fake_run_server(application: object, host: str, port: int, **options: Any) -> None:
        calls.append({"host": host, "port": port, **options})
        options["listener"].close()

    monkeypatch.setattr(flotilla.server, "run_server", fake_run_server)
    return calls
