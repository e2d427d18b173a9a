"""``flotilla ui``: the dashboard's address, signed in.

A default ``flotilla up`` protects its API with a token it keeps in a user-only file (see
SECURITY.md); this prints ``SERVER/ui#token=…`` with that token (or ``FLOTILLA_TOKEN``) in the
URL fragment, which browsers never send to the server, so it appears in no access log. The
page takes it from there, keeps it for the tab and clears the address bar.
"""

from __future__ import annotations

import os
from urllib.parse import quote

import typer

from flotilla.cli.client import ServerOption
from flotilla.sdk.connection import DEFAULT_SERVER


def ui(server: ServerOption = DEFAULT_SERVER) -> None:
    """Print the dashboard's URL, with your token so the page opens signed in."""
    from flotilla.runtime import token_for

    url = server.rstrip("/") + "/ui"
    token = os.environ.get("FLOTILLA_TOKEN") or token_for(server)
    typer.echo(f"{url}#token={quote(token, safe='')}" if token else url)


def register(app: typer.Typer) -> None:
    app.command()(ui)
