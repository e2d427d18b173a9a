"""``flotilla serve``: the REST API alone, over a database (no scheduling loop)."""

from __future__ import annotations

import typer

from flotilla.cli.startup import (
    AuthOption,
    DatabaseOption,
    HostOption,
    PortOption,
    auth_or_fail,
    ensure_default_queue,
    listen_or_fail,
    open_store_or_fail,
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
    from flotilla.collector import settle_collector
    from flotilla.secrets import SecretBox
    from flotilla.server import allowed_hosts_for, create_app, run_server
    from flotilla.stall_probe import start_if_armed
    from flotilla.web import mount_dashboard

    settings, token = auth_or_fail(auth, host)
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
        start_if_armed()  # FLOTILLA_STALL_PROBE: a benchmark diagnostic, off by default
        run_server(mount_dashboard(app), host, port, local_token=token, listener=listener)
    finally:
        store.close()


def register(app: typer.Typer) -> None:
    app.command()(serve)
