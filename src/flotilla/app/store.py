"""The service's database: opened and migrated, each failure one line naming ``--db`` and
what to do; and the ``default`` queue a fresh database gets so that the first submit works."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import make_url
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, DBAPIError

from flotilla.app.config import StartupError
from flotilla.model import QueueSpec
from flotilla.store import SqlStore

DEFAULT_QUEUE = "default"


def open_store(db: str) -> SqlStore:
    """Connect and migrate; ``StartupError`` naming ``--db`` and what to do when the
    database cannot be opened (a PostgreSQL database that does not exist, an SQLite file in
    a directory that cannot be written, a URL of no known kind). Passwords are not shown."""
    try:
        url = make_url(db)
    except ArgumentError:
        raise StartupError(
            f"--db {db}: not a database URL (sqlite:///PATH or postgresql://HOST/NAME)"
        ) from None
    shown = url.render_as_string(hide_password=True)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        path = Path(url.database or "")
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as error:
            raise StartupError(
                f"--db {shown}: cannot create {path.parent}: {error.strerror}"
            ) from None
        _create_private(path)
    try:
        return SqlStore.open(url)
    except ArgumentError as error:
        raise StartupError(f"--db {shown}: {error}") from None
    except DBAPIError as error:
        problem = _database_problem(url.get_backend_name(), url, error)
        raise StartupError(f"--db {shown}: {problem}") from None
    except OSError as error:
        raise StartupError(f"--db {shown}: {error}") from None


def _create_private(path: Path) -> None:
    """Create a new SQLite file readable by this user alone (its jobs' specs, tokens'
    owners, encrypted secrets): SQLite would make it 0644, and its ``-wal``/``-shm`` files
    take the database file's mode. An existing file is left as it is; anything else wrong
    with the path is SQLite's to report."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError:
        return


def _database_problem(backend: str, url: URL, error: Exception) -> str:
    detail = str(getattr(error, "orig", error)).strip().splitlines()
    text = detail[-1] if detail else type(error).__name__
    text = text.removeprefix("FATAL:  ").strip()
    if backend == "sqlite":
        return f"cannot open the SQLite file {url.database}: {text} (is its directory writable?)"
    if "does not exist" in text and url.database:
        where = f"-h {url.host or 'localhost'}" + (f" -U {url.username}" if url.username else "")
        return f"{text}; create it with: createdb {where} {url.database}"
    return text


def ensure_default_queue(store: SqlStore) -> str | None:
    """A database with no queue and no fleet gets a ``default`` queue, so the first submit
    works; returns the line to print about it, or None when there were queues already."""
    if store.list_queues() or store.get_fleet() is not None:
        return None
    store.put_queue(QueueSpec(name=DEFAULT_QUEUE))
    return (
        f"queue {DEFAULT_QUEUE!r} created (more: PUT /v1/queues/NAME, or a fleet file; "
        "see docs/api.md)"
    )
