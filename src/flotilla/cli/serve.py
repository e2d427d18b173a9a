"""``flotilla serve``: the REST API alone, over a database (no scheduling loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flotilla.cli.client import fail
from flotilla.cli.startup import (
    ensure_default_queue,
    listen_or_fail,
    open_store_or_fail,
    server_url,
    shown_url,
    traces_or_fail,
)


def serve(
    db: Annotated[
        str, typer.Option("--db", help="Database URL (sqlite:///… or postgresql://…).")
    ] = ("sqlite:///./flotilla.db"),
    host: Annotated[str, typer.Option(help="Listen address; beyond loopback needs --auth.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Listen port.", min=0, max=65535)] = 8467,
    auth: Annotated[
        Path | None, typer.Option("--auth", help="Token config (YAML); see docs/api.md.")
    ] = None,
) -> None:
    """Serve the REST API over a database, without a scheduler in this process."""
    from flotilla.collector import settle_collector
    from flotilla.model.errors import SpecError
    from flotilla.secrets import SecretBox
    from flotilla.server import (
        InsecureBindError,
        allowed_hosts_for,
        create_app,
        run_server,
        server_auth,
    )
    from flotilla.web import mount_dashboard

    try:
        settings, token = server_auth(auth, host)
    except SpecError as error:
        fail(f"{auth}: invalid token config", error.problems, code=2)
    except InsecureBindError as error:
        fail(str(error), code=2)
    traces = traces_or_fail()
    listener = listen_or_fail(host, port)  # a port in use: one line, nothing opened
    store = open_store_or_fail(db)
    created = ensure_default_queue(store)
    typer.echo(
        f"Flotilla API at {server_url(host, listener.getsockname()[1])} (no scheduler here), "
        f"database {shown_url(db)}" + "".join(f"\n  {line}" for line in (created, traces) if line)
    )
    try:
        app = create_app(
            store,
            None,
            settings,
            allowed_hosts=allowed_hosts_for(host),
            secrets=SecretBox.from_file(),
        )
        settle_collector()
        run_server(mount_dashboard(app), host, port, local_token=token, listener=listener)
    finally:
        store.close()


def register(app: typer.Typer) -> None:
    app.command()(serve)
