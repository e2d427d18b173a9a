"""``flotilla up``: Flotilla on this machine in one command.

The REST API, the scheduling loop and a local cluster (this machine: its cores, memory and
GPUs) in one process, over an SQLite file by default. Jobs run as local processes.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Annotated

import typer

from flotilla.cli.client import fail
from flotilla.model.scenario import Mode


def up(
    db: Annotated[
        str, typer.Option("--db", help="Database URL (sqlite:///… or postgresql://…).")
    ] = "sqlite:///.flotilla/flotilla.db",
    host: Annotated[str, typer.Option(help="Listen address; beyond loopback needs --auth.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Listen port.", min=0, max=65535)] = 8467,
    auth: Annotated[
        Path | None, typer.Option("--auth", help="Token config (YAML); see docs/api.md.")
    ] = None,
    state_dir: Annotated[
        Path, typer.Option(help="Where the local cluster keeps its runs and their logs.")
    ] = Path(".flotilla/local"),
    cluster: Annotated[str, typer.Option(help="Name of this machine's cluster.")] = "local",
    mode: Annotated[Mode, typer.Option(help="Scheduling mode: sync or async.")] = Mode.SYNC,
    cycle_interval: Annotated[
        float, typer.Option(help="Seconds between scheduling cycles.", min=0.05)
    ] = 0.5,
    replica: Annotated[
        str | None, typer.Option(help="This replica's id for leader election.")
    ] = None,
    run_as: Annotated[
        str | None,
        typer.Option(
            "--run-as",
            help="The user jobs run as. Default: 'nobody' when the server runs as root, else "
            "the server's user. Switching user needs root.",
        ),
    ] = None,
    lease_ttl: Annotated[
        float,
        typer.Option(
            help="Seconds the scheduling lease lasts without renewal: how long a failover takes.",
            min=1.0,
        ),
    ] = 10.0,
) -> None:
    """Start Flotilla here: REST API + scheduler + a local cluster that runs jobs as processes."""
    from flotilla.backends.local import LocalBackend
    from flotilla.model import QueueSpec
    from flotilla.model.errors import SpecError
    from flotilla.model.quantity import format_quantity
    from flotilla.scheduler.loop import LoopSettings, SchedulingLoop, default_replica_id
    from flotilla.scheduler.records import cluster_spec_from_inventory
    from flotilla.secrets import SecretBox
    from flotilla.server import (
        InsecureBindError,
        allowed_hosts_for,
        create_app,
        run_server,
        server_auth,
    )
    from flotilla.store import SqlStore

    try:
        settings, token = server_auth(auth, host)
    except SpecError as error:
        fail(f"{auth}: invalid token config", error.problems, code=2)
    except InsecureBindError as error:
        fail(str(error), code=2)
    if run_as is None and os.geteuid() == 0:
        run_as = "nobody"  # never the server's root: a job is anyone who may submit
    if db.startswith("sqlite:///") and not db.startswith("sqlite:////"):
        Path(db.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        backend = LocalBackend(cluster=cluster, state_dir=state_dir, run_as=run_as)
    except ValueError as error:
        fail(str(error), code=2)
    store = SqlStore.open(db)
    secrets = SecretBox.from_file()
    nodes = backend.inventory().nodes
    store.upsert_cluster(
        cluster_spec_from_inventory(cluster, "local", nodes, labels={"flotilla.io/local": "true"})
    )
    if not store.list_queues():
        store.put_queue(QueueSpec(name="default"))
    loop = SchedulingLoop(
        store,
        {cluster: backend},
        LoopSettings(
            mode=mode,
            cycle_interval=cycle_interval,
            replica=replica or default_replica_id(),
            lease_ttl=lease_ttl,
        ),
        secrets=secrets,
    )
    stop = threading.Event()
    scheduler = threading.Thread(target=loop.run, args=(stop,), name="flotilla-scheduler")
    scheduler.start()
    node = nodes[0]
    capacity = ", ".join(
        f"{name} {format_quantity(name, amount)}"
        for name, amount in node.capacity.items()
        if amount
    )
    typer.echo(
        f"Flotilla is up: API http://{host}:{port} (OpenAPI /docs), database {db}\n"
        f"  cluster {cluster}: node {node.name} ({capacity}); {mode.value} scheduling every "
        f"{cycle_interval:g}s; jobs run as {run_as or 'this user'}\n"
        "  try: flotilla submit examples/jobs/hello.yaml"
    )
    try:
        app = create_app(
            store, loop, settings, allowed_hosts=allowed_hosts_for(host), secrets=secrets
        )
        run_server(app, host, port, local_token=token)
    finally:
        stop.set()
        scheduler.join(timeout=30)
        backend.close()
        store.close()


def register(app: typer.Typer) -> None:
    app.command()(up)
