"""Store fixtures: every contract test runs against SQLite and against PostgreSQL.

PostgreSQL: one fresh database per test session (per xdist worker), one fresh schema per test,
both dropped afterwards. When the server is unreachable the PostgreSQL cases are skipped with a
reason, except under CI=true, where they fail: CI never silently skips them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, make_url
from sqlalchemy.exc import OperationalError
from store_support import FakeClock

from flotilla.model import QueueSpec
from flotilla.store import SqlStore

POSTGRES_URL = os.environ.get(
    "FLOTILLA_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@pytest.fixture(scope="session")
def postgres_admin() -> Iterator[tuple[Engine, str]]:
    """An autocommit engine on a database created for this session, and that database's URL."""
    server = create_engine(make_url(POSTGRES_URL), isolation_level="AUTOCOMMIT")
    try:
        connection = server.connect()
    except OperationalError as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL must be reachable in CI at {POSTGRES_URL}: {error}")
        pytest.skip(f"PostgreSQL unreachable at {POSTGRES_URL} (start it to run these)")
    name = f"flotilla_test_{uuid.uuid4().hex[:12]}"
    connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = make_url(POSTGRES_URL).set(database=name)
    database = create_engine(url, isolation_level="AUTOCOMMIT")
    yield database, url.render_as_string(hide_password=False)
    database.dispose()
    connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    connection.close()
    server.dispose()


def postgres_schema_url(admin: tuple[Engine, str]) -> str:
    """A URL whose connections live in a brand-new schema of the session database."""
    engine, url = admin
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with engine.connect() as connection:
        connection.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    return (
        make_url(url)
        .set(query={"options": f"-csearch_path={schema}"})
        .render_as_string(hide_password=False)
    )


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
