"""Migrations and engine settings: the ORM and the Alembic head agree on every database."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from flotilla.store import SqlStore, make_engine, upgrade
from flotilla.store.schema import Base


def test_migrations_match_the_orm_exactly(database_url: str) -> None:
    engine = make_engine(database_url)
    upgrade(engine)
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        differences = compare_metadata(context, Base.metadata)
    engine.dispose()
    assert differences == []


def test_open_upgrades_an_empty_database_and_is_idempotent(database_url: str) -> None:
    SqlStore.open(database_url).close()
    store = SqlStore.open(database_url)
    tables = set(inspect(store.engine).get_table_names())
    assert set(Base.metadata.tables) <= tables and "alembic_version" in tables
    assert store.latest_serial() == 0
    store.close()


def test_sqlite_runs_in_wal_with_foreign_keys_and_a_busy_timeout(tmp_path: object) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/flotilla.db")
    with engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 30_000
    engine.dispose()
