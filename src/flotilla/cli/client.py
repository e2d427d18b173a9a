"""What the client commands share: the server option, an SDK client per command, and how an
API refusal is shown.

``client_factory`` builds the ``httpx.Client`` under the SDK's ``flotilla.Client``; tests
replace it with one bound to the ASGI app, so every command runs against the real API
without a socket. The SDK and ``httpx`` are imported when a command calls the API, not when
the command line is parsed (docs/performance.md, CLI start-up).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from flotilla.sdk.connection import DEFAULT_SERVER, auth_headers, bearer_token, tls_settings

if TYPE_CHECKING:
    import httpx

    from flotilla.sdk import Client

ClientFactory = Callable[[str, str | None], "httpx.Client"]


def default_client(server: str, token: str | None) -> httpx.Client:
    import httpx

    return httpx.Client(
        base_url=server, headers=auth_headers(token), timeout=30.0, **tls_settings(server)
    )


client_factory: ClientFactory = default_client
"""Replace to point the commands at something else than a real server (tests)."""

ServerOption = Annotated[
    str,
    typer.Option(
        "--server",
        envvar="FLOTILLA_SERVER",
        help="API server URL (env FLOTILLA_SERVER). The token comes from FLOTILLA_TOKEN, or"
        " for a loopback server started by this user, from its token file.",
    ),
]


@contextmanager
def api(server: str) -> Iterator[Client]:
    """An SDK client for one command. A refusal inside prints the server's message and
    problems and exits 1 (an invalid job file: 2, before any request)."""
    from flotilla.sdk.client import Client
    from flotilla.sdk.errors import FlotillaError, InvalidSpec

    address = server.rstrip("/") or DEFAULT_SERVER
    client = Client(address, http=client_factory(address, bearer_token(address, None)))
    try:
        yield client
    except InvalidSpec as invalid:
        fail(invalid.message, invalid.problems, code=2)
    except FlotillaError as failure:
        fail(failure.message, failure.problems, code=1)
    finally:
        client.close()


def fail(message: str, problems: list[str] | None = None, code: int = 1) -> NoReturn:
    """``error: MESSAGE`` and each problem on a line of its own (never folded) on standard
    error, then exit ``code``. Styled by typer's own ``secho`` (bold red on a terminal, bold
    alone under ``NO_COLOR``, as rich would), so that an error does not start rich."""
    plain = bool(os.environ.get("NO_COLOR"))
    typer.secho("error:", err=True, nl=False, fg=None if plain else "red", bold=True)
    typer.echo(f" {message}", err=True)
    for line in problems or []:
        typer.echo(f"  {line}", err=True)
    raise typer.Exit(code)
