"""What ``flotilla up`` and ``flotilla serve`` do before serving, each failure one clear line:
listen on the port (first, so a port in use stops everything before it starts), open the
database, make sure a job has a queue to go to, and tell the user how to reach the server."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flotilla.cli.client import fail
from flotilla.sdk.client import DEFAULT_SERVER

if TYPE_CHECKING:
    from flotilla.server import AuthSettings
    from flotilla.store import SqlStore

DEFAULT_QUEUE = "default"

# The options ``up`` and ``serve`` share (each gives its own default database).
DatabaseOption = Annotated[
    str, typer.Option("--db", help="Database URL (sqlite:///… or postgresql://…).")
]
HostOption = Annotated[str, typer.Option(help="Listen address; beyond loopback needs --auth.")]
PortOption = Annotated[int, typer.Option(help="Listen port.", min=0, max=65535)]
AuthOption = Annotated[
    Path | None, typer.Option("--auth", help="Token config (YAML); see docs/api.md.")
]


def auth_or_fail(auth: Path | None, host: str) -> tuple[AuthSettings, str | None]:
    """The server's auth (``server_auth``: the token config, or a local token made now), or
    exit 2 with one line: a token config that is not valid, a non-loopback host without one."""
    from flotilla.model.errors import SpecError
    from flotilla.server import InsecureBindError, server_auth

    try:
        return server_auth(auth, host)
    except SpecError as error:
        fail(f"{auth}: invalid token config", error.problems, code=2)
    except InsecureBindError as error:
        fail(str(error), code=2)


def listen_or_fail(host: str, port: int) -> socket.socket:
    """The listening socket, or exit 2 with one line (a port in use names ``--port``)."""
    from flotilla.server import ListenError, bind_listener

    try:
        return bind_listener(host, port)
    except ListenError as error:
        fail(str(error), code=2)


def shown_url(db: str) -> str:
    """The database URL as printed: its password hidden."""
    from sqlalchemy import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(db).render_as_string(hide_password=True)
    except ArgumentError:
        return db


def traces_or_fail() -> str | None:
    """Install the trace exporter ``FLOTILLA_TRACES`` names (``flotilla.tracing``); the
    line to print about it, or None when traces are off. Exit 2 naming the variable."""
    from flotilla.tracing import TracingError, configure

    try:
        return configure()
    except TracingError as error:
        fail(str(error), code=2)


def open_store_or_fail(db: str) -> SqlStore:
    """Connect and migrate; exit 2 with one line naming ``--db`` and what to do when the
    database cannot be opened (a PostgreSQL database that does not exist, an SQLite file in
    a directory that cannot be written, a URL of no known kind). Passwords are not shown."""
    from sqlalchemy import make_url
    from sqlalchemy.exc import ArgumentError, DBAPIError

    from flotilla.store import SqlStore

    try:
        url = make_url(db)
    except ArgumentError:
        fail(f"--db {db}: not a database URL (sqlite:///PATH or postgresql://HOST/NAME)", code=2)
    shown = url.render_as_string(hide_password=True)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        path = Path(url.database or "")
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as error:
            fail(f"--db {shown}: cannot create {path.parent}: {error.strerror}", code=2)
        _create_private(path)
    try:
        return SqlStore.open(url)
    except ArgumentError as error:
        fail(f"--db {shown}: {error}", code=2)
    except DBAPIError as error:
        fail(f"--db {shown}: {_database_problem(url.get_backend_name(), url, error)}", code=2)
    except OSError as error:
        fail(f"--db {shown}: {error}", code=2)


def _create_private(path: Path) -> None:
    """Create a new SQLite file readable by this user alone (its jobs' specs, tokens'
    owners, encrypted secrets): SQLite would make it 0644, and its ``-wal``/``-shm`` files
    take the database file's mode. An existing file is left as it is; anything else wrong
    with the path is SQLite's to report."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError:
        return


def _database_problem(backend: str, url: object, error: Exception) -> str:
    from sqlalchemy.engine import URL

    assert isinstance(url, URL)
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
    from flotilla.model import QueueSpec

    if store.list_queues() or store.get_fleet() is not None:
        return None
    store.put_queue(QueueSpec(name=DEFAULT_QUEUE))
    return (
        f"queue {DEFAULT_QUEUE!r} created (more: PUT /v1/queues/NAME, or a fleet file; "
        "see docs/api.md)"
    )


def server_url(host: str, port: int) -> str:
    """The URL a client on this machine uses (a wildcard address is reached on loopback)."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def submit_hint(host: str, port: int) -> str:
    """``flotilla submit …``, with ``--server`` when the server is not where the CLI looks
    by default."""
    url = server_url(host, port)
    option = "" if url == DEFAULT_SERVER else f" --server {url}"
    return f"try: flotilla submit{option} examples/jobs/hello.yaml"
