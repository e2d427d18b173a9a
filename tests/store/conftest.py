"""Store fixtures: every contract test runs against SQLite and against PostgreSQL.

PostgreSQL: one fresh database per test session (``postgres_admin`` in tests/conftest.py), one
fresh schema per test. When the server is unreachable the PostgreSQL cases are skipped with a
reason, except under CI=true, where they fail: CI never silently skips them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine
from store_support import FakeClock
from tests.postgres_support import postgres_schema_url

from flotilla.model import QueueSpec
from flotilla.store import SqlStore


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/flotilla.db"
    return postgres_schema_url(request.getfixturevalue("postgres_admin"))


@pytest.fixture
def postgres_url(postgres_admin: tuple[Engine, str]) -> str:
    return postgres_schema_url(postgres_admin)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(database_url: str, clock: FakeClock) -> Iterator[SqlStore]:
    store = SqlStore.open(database_url, clock=clock)
    store.put_queue(QueueSpec(name="team-a"))
    store.put_queue(QueueSpec(name="team-b", weight=2))
    yield store
    store.close()
