"""Alembic environment: always run programmatically by ``flotilla.store.engine.upgrade`` (or
by a developer with a connection in ``config.attributes``), never from an ini file."""

from __future__ import annotations

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from flotilla.store.schema import Base

MIGRATION_LOCK = 7_346_221
"""PostgreSQL advisory lock key: replicas starting together migrate one after another."""


def run_migrations(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("flotilla migrations run with a connection: use flotilla.store.upgrade")
run_migrations(connection)
