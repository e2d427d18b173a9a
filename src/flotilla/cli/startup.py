"""What ``flotilla up`` and ``flotilla serve`` do before serving, each failure one clear line:
listen on the port (first, so a port in use stops everything before it starts), open the
database, make sure a job has a queue to go to, and tell the user how to reach the server."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flotilla.cli.client import fail
from flotilla.sdk.connection import DEFAULT_SERVER

if TYPE_CHECKING:
    from flotilla.server import AuthSettings
    from flotilla.store import SqlStore

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
    """Connect and migrate (``flotilla.app.store.open_store``); exit 2 with its one line
    naming ``--db`` and what to do when the database cannot be opened."""
    from flotilla.app import StartupError
    from flotilla.app.store import open_store

    try:
        return open_store(db)
    except StartupError as error:
        fail(error.message, error.problems, code=2)


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
