"""API fixtures: the real app over a real SqlStore, with a fake scheduler handle.

``store`` is SQLite in a temporary directory; ``any_store`` is parametrised over SQLite and
PostgreSQL for the job-lifecycle tests (PostgreSQL skipped with a reason when unreachable,
failing under CI=true, as in tests/store).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from flotilla.model import QueueSpec
from flotilla.server import AuthSettings, create_app
from flotilla.store import SqlStore
from tests.postgres_support import postgres_schema_url
from tests.server.api_support import FakeScheduler


def _open(url: str) -> SqlStore:
    store = SqlStore.open(url)
    store.put_queue(QueueSpec(name="team-a"))
    store.put_queue(QueueSpec(name="team-b", weight=2))
    return store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    store = _open(f"sqlite:///{tmp_path}/flotilla.db")
    yield store
    store.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlStore]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/flotilla.db"
    else:
        url = postgres_schema_url(request.getfixturevalue("postgres_admin"))
    store = _open(url)
    yield store
    store.close()


@pytest.fixture
def scheduler() -> FakeScheduler:
    return FakeScheduler()


@pytest.fixture
def client(store: SqlStore, scheduler: FakeScheduler) -> TestClient:
    """No token config: everyone is the anonymous admin (the loopback default)."""
    return TestClient(create_app(store, scheduler, AuthSettings.disabled(), poll_interval=0))


@pytest.fixture
def lifecycle_client(any_store: SqlStore, scheduler: FakeScheduler) -> TestClient:
    return TestClient(create_app(any_store, scheduler, AuthSettings.disabled(), poll_interval=0))
