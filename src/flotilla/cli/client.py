"""The HTTP client the CLI commands share: where the server is, the token, error handling.

``client_factory`` builds the ``httpx.Client``; tests replace it with one bound to the ASGI
app, so every command runs against the real API without a socket.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console
from rich.markup import escape

from flotilla.runtime import token_for

DEFAULT_SERVER = "http://127.0.0.1:8467"

ClientFactory = Callable[[str, str | None], httpx.Client]


def default_client(server: str, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=server, headers=headers, timeout=30.0)


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


class ApiFailure(Exception):
    """The server refused (its message and problems) or could not be reached."""

    def __init__(
        self, message: str, problems: list[str] | None = None, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.problems = problems or []
        self.status = status
        """The HTTP status of a refusal (``None``: the server could not be reached)."""


class Api:
    def __init__(self, http: httpx.Client, server: str) -> None:
        self.http = http
        self.server = server

    def call(self, method: str, path: str, **options: Any) -> Any:
        try:
            response = self.http.request(method, path, **options)
        except httpx.TransportError as error:
            raise ApiFailure(
                f"cannot reach the Flotilla server at {self.server}: {error}"
            ) from None
        if response.status_code >= 400:
            try:
                body = response.json()
                message = str(body.get("message", response.reason_phrase))
                problems = [str(line) for line in body.get("problems", [])]
            except (ValueError, AttributeError):
                message, problems = f"{response.status_code} {response.reason_phrase}", []
            raise ApiFailure(message, problems, response.status_code)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def get(self, path: str, **options: Any) -> Any:
        return self.call("GET", path, **options)

    def post(self, path: str, **options: Any) -> Any:
        return self.call("POST", path, **options)


@contextmanager
def api(server: str) -> Iterator[Api]:
    """An API session; an ``ApiFailure`` inside prints the server's message and exits 1."""
    token = os.environ.get("FLOTILLA_TOKEN") or token_for(server)
    http = client_factory(server.rstrip("/"), token)
    try:
        yield Api(http, server)
    except ApiFailure as failure:
        fail(failure.message, failure.problems, code=1)
    finally:
        http.close()


def fail(message: str, problems: list[str] | None = None, code: int = 1) -> NoReturn:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    for line in problems or []:
        err.print(f"  {line}", highlight=False, markup=False)
    raise typer.Exit(code)
