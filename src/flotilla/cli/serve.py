"""``flotilla serve``: the REST API alone, over a database (no scheduling loop)."""

from __future__ import annotations

import typer

from flotilla.cli.client import fail
from flotilla.cli.startup import (
    AuthOption,
    DatabaseOption,
    HostOption,
    PortOption,
    auth_or_fail,
    listen_or_fail,
    server_url,
    shown_url,
    traces_or_fail,
)


def serve(
    db: DatabaseOption = "sqlite:///./flotilla.db",
    host: HostOption = "127.0.0.1",
    port: PortOption = 8467,
    auth: AuthOption = None,
) -> None:
    """Serve the REST API over a database, without a scheduler in this process."""
    from flotilla.app import (
        ApiConfig,
        ApiServiceConfig,
        StartupError,
        build_api_service,
        settle_process,
    )

    settings, token = auth_or_fail(auth, host)
    traces = traces_or_fail()
    listener = listen_or_fail(host, port)  # a port in use: one line, nothing opened
    api = ApiConfig(host=host, port=port, auth=settings, local_token=token)
    try:
        service = build_api_service(ApiServiceConfig(db=db, api=api))
    except StartupError as error:
        fail(error.message, error.problems, code=2)
    typer.echo(
        f"Flotilla API at {server_url(host, listener.getsockname()[1])} (no scheduler here), "
        f"database {shown_url(db)}"
        + "".join(f"\n  {line}" for line in (*service.notices, traces) if line)
    )
    with service:
        service.app()  # built before the collector settles, as the rest of start-up
        settle_process()
        service.serve(listener)


def register(app: typer.Typer) -> None:
    app.command()(serve)
