"""What the client commands share: the server option, an SDK client per command, and how an
API refusal is shown.

``client_factory`` builds the ``httpx.Client`` under the SDK's ``flotilla.Client``; tests
replace it with one bound to the ASGI app, so every command runs against the real API
without a socket.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, NoReturn

import httpx
import typer
from rich.console import Console
from rich.markup import escape

from flotilla.sdk import Client, FlotillaError, InvalidSpec
from flotilla.sdk.client import DEFAULT_SERVER, auth_headers, bearer_token

ClientFactory = Callable[[str, str | None], httpx.Client]


def default_client(server: str, token: str | None) -> httpx.Client:
    return httpx.Client(base_url=server, headers=auth_headers(token), timeout=30.0)


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

err = Console(stderr=True, soft_wrap=True)


@contextmanager
def api(server: str) -> Iterator[Client]:
    """An SDK client for one command. A refusal inside prints the server's message and
    problems and exits 1 (an invalid job file: 2, before any request)."""
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
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    for line in problems or []:
        err.print(f"  {line}", highlight=False, markup=False)
    raise typer.Exit(code)
