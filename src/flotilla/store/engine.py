"""Engines from URLs, with the settings that make each database safe to share, and migrations.

SQLite: WAL (readers never block the writer), foreign keys on, a busy timeout, synchronous=FULL
(a commit is on disk before it returns) and ``BEGIN IMMEDIATE`` for every transaction that may
write, so a transaction that reads and then writes never fails half-way on a lock upgrade;
read-only sessions (``READ_ONLY_OPTION``) begin deferred and never take the write lock.
PostgreSQL: psycopg 3, READ COMMITTED; serial ordering comes from the counter row lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.engine import URL

if TYPE_CHECKING:
    from alembic.config import Config

DEFAULT_URL = "sqlite:///./flotilla.db"

READ_ONLY_OPTION = "flotilla_read_only"
"""Execution option of connections that only read. On SQLite they begin a deferred
transaction: in WAL mode a reader sees a consistent committed state without taking the write
lock, so the API's reads and the scheduler's syncs never queue behind a write (and writes never
queue behind them). Writers serialize among themselves, so a reader still sees serials as a
prefix."""
SQLITE_BUSY_TIMEOUT_MS = 30_000
MIGRATIONS = "flotilla.store:migrations"


def normalise_url(url: str | URL) -> URL:
    """``postgresql://`` means psycopg 3 here (SQLAlchemy's default driver is not installed)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def make_engine(url: str | URL = DEFAULT_URL, **options: Any) -> Engine:
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(
            parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, **options
        )
        _configure_sqlite(engine)
        return engine
    return create_engine(parsed, pool_pre_ping=True, **options)


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" hook below issue BEGIN, not the sqlite3 module.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        if connection.get_execution_options().get(READ_ONLY_OPTION):
            connection.exec_driver_sql("BEGIN")
        else:
            connection.exec_driver_sql("BEGIN IMMEDIATE")


def alembic_config() -> Config:
    from alembic.config import Config  # imported here: Alembic is slow to import

    config = Config()
    config.set_main_option("script_location", MIGRATIONS)
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision``; safe to run from several replicas at once."""
    from alembic import command

    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    """The database's migration revision against the newest one this code ships."""

    current: str | None
    head: str | None

    @property
    def at_head(self) -> bool:
        return self.current is not None and self.current == self.head


def schema_status(engine: Engine) -> SchemaStatus:
    """Read the revision the database is at (raises if the database cannot be reached)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    return SchemaStatus(current=current, head=head)
