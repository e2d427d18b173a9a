"""``flotilla up``: Flotilla on this machine in one command.

The REST API, the scheduling loop and a local cluster (this machine: its cores, memory and
GPUs) in one process, over an SQLite file by default. Jobs run as local processes. With
``--no-api`` the scheduler and its clusters alone, for API processes (``flotilla serve``) of
their own over the same database.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flotilla.cli.client import fail
from flotilla.cli.draining import Drain, shut_down
from flotilla.cli.startup import (
    AuthOption,
    DatabaseOption,
    HostOption,
    PortOption,
    auth_or_fail,
    ensure_default_queue,
    listen_or_fail,
    open_store_or_fail,
    shown_url,
    submit_hint,
    traces_or_fail,
)
from flotilla.model.scenario import Mode

if TYPE_CHECKING:
    from flotilla.model.fleet import Fleet
    from flotilla.service.fleet import FleetRuntime
    from flotilla.service.loop import SchedulingLoop
    from flotilla.service.projection import Projection
    from flotilla.store import SqlStore
    from flotilla.whatif.estimator import EstimatorMethod


def up(
    db: DatabaseOption = "sqlite:///.flotilla/flotilla.db",
    host: HostOption = "127.0.0.1",
    port: PortOption = 8467,
    auth: AuthOption = None,
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
            help="The user every job runs as (all jobs share it, so they can read and signal "
            "each other). Default: as root, each run gets a uid of its own (--uid-range); "
            "otherwise the server's user. Switching user needs root.",
        ),
    ] = None,
    uid_range: Annotated[
        str | None,
        typer.Option(
            "--uid-range",
            help="As root, without --run-as: the uids runs get one each of, FIRST-LAST "
            "(default 60000-60999; uids with an account are skipped).",
        ),
    ] = None,
    lease_ttl: Annotated[
        float,
        typer.Option(
            help="Seconds the scheduling lease lasts without renewal: how long a failover takes.",
            min=1.0,
        ),
    ] = 10.0,
    finished_retention: Annotated[
        float,
        typer.Option(
            help="Seconds a finished job stays in the scheduler's memory after it ended; "
            "the database keeps every job, and the API reads old ones from it.",
            min=0.0,
        ),
    ] = 300.0,  # service.retention.DEFAULT_RETENTION_SECONDS (not imported: the CLI starts fast)
    algorithm_process: Annotated[
        bool,
        typer.Option(
            "--algorithm-process/--algorithm-thread",
            help="Async mode: run each scheduling round in a forked child process instead of "
            "on a thread (see docs/architecture.md for when it pays).",
        ),
    ] = False,
    fleet_file: Annotated[
        Path | None,
        typer.Option(
            "--fleet",
            help="A fleet file: clusters and their backends, queues, quotas, settings "
            "(docs/fleet.md). Without it: one local cluster of this machine.",
        ),
    ] = None,
    api: Annotated[
        bool,
        typer.Option(
            "--api/--no-api",
            help="Serve the REST API in this process. --no-api: the scheduler and its clusters "
            "alone, beside `flotilla serve` processes over the same database (it then finds "
            "their submissions at its next cycle).",
        ),
    ] = True,
    projection_interval: Annotated[
        float,
        typer.Option(
            "--projection-interval",
            help="Seconds between projections of the live fleet forward, which give every "
            "waiting job an estimated start (sooner after many changes); 0 turns it off.",
            min=0.0,
        ),
    ] = 60.0,
    projection_runtimes: Annotated[
        str,
        typer.Option(
            "--projection-runtimes",
            help="Runtime estimators of the projection, comma-separated, the first shown: "
            "auto (max_runtime, else history), max_runtime, history.",
        ),
    ] = "auto",
    drain: Annotated[
        bool,
        typer.Option(
            "--drain",
            help="On Ctrl-C or SIGTERM, start no new job and wait for the running ones to end "
            "(Ctrl-C again stops at once). Without it, running jobs keep running and the next "
            "start over this database picks them up.",
        ),
    ] = False,
) -> None:
    """Start Flotilla here: REST API + scheduler + a local cluster that runs jobs as processes.

    The local cluster is this machine: its usable cores, its memory, and the NVIDIA GPUs NVML
    finds (model, memory, NUMA nodes, links), or as many as the environment variable
    FLOTILLA_LOCAL_GPUS says when set (0 hides them). With ``--fleet FILE``, the
    clusters (each run by its backend), queues, quotas, priority classes and scheduling
    settings of a fleet file instead (see docs/fleet.md)."""
    from flotilla.collector import settle_collector
    from flotilla.secrets import SecretBox
    from flotilla.server import allowed_hosts_for, create_app, run_server
    from flotilla.service.fleet import FleetRuntime
    from flotilla.service.loop import LoopSettings, SchedulingLoop, default_replica_id
    from flotilla.stall_probe import start_if_armed
    from flotilla.web import mount_dashboard

    if api:
        settings, token = auth_or_fail(auth, host)
    traces = traces_or_fail()
    if api:
        listener = listen_or_fail(host, port)  # a port in use: one line, nothing started
        port = listener.getsockname()[1]
    uid_range = _identities(run_as, uid_range)  # before any database is touched
    estimators = _projection_methods(projection_runtimes)
    fleet = _read_fleet(fleet_file, state_dir) if fleet_file is not None else None
    store = open_store_or_fail(db)
    secrets = SecretBox.from_file()
    runtime = FleetRuntime(
        store, {}, local_state_dir=state_dir, local_run_as=run_as, local_uid_range=uid_range
    )
    if fleet is not None:
        lines = _apply_fleet(store, runtime, fleet, fleet_file)
    elif store.get_fleet() is not None:  # a fleet was applied to this database before
        runtime.sync()
        if runtime.problems:
            fail("cannot drive the fleet in force", list(runtime.problems.values()), code=2)
        lines = runtime.connect()
    else:
        lines = _default_cluster(store, runtime, cluster, state_dir, run_as, uid_range)
    loop_settings = LoopSettings(
        mode=mode,
        cycle_interval=cycle_interval,
        replica=replica or default_replica_id(),
        lease_ttl=lease_ttl,
        finished_retention=finished_retention,
        algorithm_process=algorithm_process,
    )
    loop = SchedulingLoop(store, {}, loop_settings, fleet=runtime, secrets=secrets)
    settle_collector()
    start_if_armed()  # FLOTILLA_STALL_PROBE: a diagnostic for the benchmarks, off by default
    stop = threading.Event()
    scheduler = threading.Thread(target=loop.run, args=(stop,), name="flotilla-scheduler")
    scheduler.start()
    # Submissions and cancels committed by other processes (``flotilla serve``, replicas)
    # wake this loop too (PostgreSQL; ``store/wake.py``).
    wakes = store.listen_for_wakes(loop.wake)
    scheduling = f"{loop.settings.mode.value} scheduling every {loop.settings.cycle_interval:g}s"
    if runtime.fleet is None:  # the embedded default: one line, as it always was
        lines[-1] += f"; {scheduling}"
    else:
        lines.append(scheduling)
    lines += _isolation_notices(runtime)  # what of a job's requests is not enforced here
    lines += _gpu_notices(runtime)  # the GPUs found here, and how (NVML, or as told)
    serving = (
        f"API http://{host}:{port} (dashboard /ui, OpenAPI /docs)"
        if api
        else "scheduler only, no API here (run `flotilla serve` over the same database)"
    )
    typer.echo(
        f"Flotilla is up: {serving}, database {shown_url(db)}\n"
        + "".join(f"  {line}\n" for line in lines)
        + f"  local jobs run as {_runs_as(run_as, uid_range)}\n"
        + (f"  {traces}\n" if traces else "")
        + (f"  {submit_hint(host, port)}" if api else "  stop with Ctrl-C or SIGTERM")
    )
    draining = Drain(store, loop) if drain and api else None
    # The projection (issue 25): a component of its own, started and stopped here only.
    projection = (
        _start_projection(store, db, loop, projection_interval, estimators)
        if api and projection_interval > 0
        else None
    )
    try:
        try:
            if api:
                app = create_app(
                    store,
                    loop,
                    settings,
                    allowed_hosts=allowed_hosts_for(host),
                    secrets=secrets,
                    cluster_problems=runtime.problems,
                    projection=projection,
                )
                run_server(
                    mount_dashboard(app),
                    host,
                    port,
                    local_token=token,
                    listener=listener,
                    drain=draining.run if draining is not None else None,
                )
            else:
                _until_stopped(scheduler)
        finally:  # Ctrl-C, or SIGTERM (SystemExit): say what becomes of the running jobs
            if draining is None or not draining.started:
                shut_down(store, loop, drain)
    finally:
        if projection is not None:
            projection.stop()
        wakes.close()
        stop.set()
        loop.wake()  # not a cycle interval later
        scheduler.join(timeout=30)
        runtime.close()
        store.close()


def _projection_methods(runtimes: str) -> tuple[EstimatorMethod, ...]:
    """``--projection-runtimes`` read, or exit 2 naming it (before anything starts)."""
    from flotilla.whatif.estimator import EstimatorMethod

    try:
        return tuple(EstimatorMethod(name.strip()) for name in runtimes.split(","))
    except ValueError:
        fail(f"--projection-runtimes: {runtimes!r}: give auto, max_runtime or history", code=2)


def _start_projection(
    store: SqlStore,
    database: str,
    loop: SchedulingLoop,
    interval: float,
    methods: tuple[EstimatorMethod, ...],
) -> Projection:
    """The background projection of the live fleet (``service/projection.py``), started."""
    from flotilla.model.scenario import Settings
    from flotilla.service.projection import Projection, ProjectionSettings

    settings = ProjectionSettings(interval=interval, methods=methods)
    scheduling = Settings(
        cycle_interval=loop.settings.cycle_interval,
        mode=loop.settings.mode,
        assignment_strategy=loop.settings.scheduling.assignment_strategy,
    )
    projection = Projection(
        store, settings, scheduling, pace=loop.precedence.pace, database=database
    )
    projection.start()
    return projection


def _isolation_notices(runtime: FleetRuntime) -> list[str]:
    """One line per distinct notice of the local clusters: what of a job's requests this
    machine does not enforce (no cgroups, no PID namespaces; ``backends/local_tree.py``)."""
    from flotilla.backends.local import LocalBackend

    notices = {
        backend.isolation_notice
        for backend in runtime.backends.values()
        if isinstance(backend, LocalBackend)
    }
    return sorted(notice for notice in notices if notice)


def _gpu_notices(runtime: FleetRuntime) -> list[str]:
    """One line per local cluster: the GPUs it found and how (``backends/gpu_inventory.py``)."""
    from flotilla.backends.local import LocalBackend

    return [
        f"cluster {name}: {backend.gpu_notice}"
        for name, backend in sorted(runtime.backends.items())
        if isinstance(backend, LocalBackend)
    ]


def _until_stopped(scheduler: threading.Thread) -> None:
    """Wait, without an API to serve, for Ctrl-C or SIGTERM (or the scheduler's end)."""
    stopped = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda _number, _frame: stopped.set())
    try:
        while scheduler.is_alive() and not stopped.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def _read_fleet(path: Path, state_dir: Path) -> Fleet:
    """The fleet file, fully checked for this machine (backends installed, secrets
    resolvable): exit 2 naming every problem."""
    from flotilla.model.fleet_loader import FleetError, load_fleet
    from flotilla.service.fleet import check_fleet

    try:
        fleet = load_fleet(path)
    except FleetError as error:
        fail(f"{path}: invalid fleet", error.problems, code=2)
    problems = check_fleet(fleet, local_state_dir=state_dir)
    if problems:
        fail(f"{path}: invalid fleet", problems, code=2)
    return fleet


def _apply_fleet(
    store: SqlStore, runtime: FleetRuntime, fleet: Fleet, path: Path | None
) -> list[str]:
    """Make ``fleet`` the fleet in force (as ``flotilla fleet apply`` does), then connect."""
    from flotilla.service.fleet import fleet_change, local_state_dir_of
    from flotilla.store import ConflictError

    for cluster in fleet.clusters:
        if cluster.backend == "local":
            state_dir = local_state_dir_of(cluster, runtime.local_state_dir)
            _refuse_foreign_owner(store, cluster.name, state_dir)
    # Build every backend before writing anything: a factory refusing its settings is a
    # configuration error (a constructor never fails for an engine being down).
    runtime.install(fleet, runtime.version)
    if runtime.problems:
        runtime.close()
        fail(
            f"{path}: cannot start the fleet",
            [f"cluster {name}: {problem}" for name, problem in runtime.problems.items()],
            code=2,
        )
    try:
        record = store.apply_fleet(fleet_change(fleet))
    except ConflictError as error:
        runtime.close()
        fail(f"{path}: cannot apply the fleet", error.problems or [str(error)], code=2)
    runtime.version = record.version
    return [
        f"fleet {fleet.name!r} (version {record.version}) from {path}",
        *runtime.connect(),
    ]


def _refuse_foreign_owner(store: SqlStore, cluster: str, state_dir: Path) -> None:
    """Exit 2 when another host or state dir drives ``cluster``; the operator is told this
    replica's state dir (the cluster's label holds only a digest of the other's)."""
    from flotilla.service.fleet import check_local_owner, local_owner

    problem = check_local_owner(store, cluster, local_owner(state_dir))
    if problem is not None:
        fail(f"{problem} (this replica's state dir: {state_dir.expanduser().resolve()})", code=2)


def _identities(run_as: str | None, uid_range: str | None) -> str | None:
    """The uid range local runs get a uid of their own from (``None``: they run as
    ``run_as`` or as this user). As root without ``--run-as``, the default range: a job is
    anyone who may submit, never root and never a neighbour of another job (issue 23). Exit 2
    naming the option when it cannot be used here."""
    from flotilla.backends.local_environment import check_run_as
    from flotilla.backends.local_identity import DEFAULT_UID_RANGE, parse_uid_range

    if run_as is not None and uid_range is not None:
        fail("--uid-range: give either --run-as (one user for every job) or --uid-range", code=2)
    try:
        check_run_as(run_as)
        if uid_range is not None:
            parse_uid_range(uid_range)
            if os.geteuid() != 0:
                raise ValueError("uid_range: giving each run a uid of its own needs root")
    except ValueError as error:
        fail(f"--{str(error).replace('_', '-', 1)}", code=2)
    if uid_range is None and run_as is None and os.geteuid() == 0:
        return "{}-{}".format(*DEFAULT_UID_RANGE)
    return uid_range


def _runs_as(run_as: str | None, uid_range: str | None) -> str:
    if uid_range is not None:
        return f"a uid of their own per run (from {uid_range})"
    return run_as or "this user"


def _default_cluster(
    store: SqlStore,
    runtime: FleetRuntime,
    cluster: str,
    state_dir: Path,
    run_as: str | None,
    uid_range: str | None,
) -> list[str]:
    """Today's embedded default: one local cluster of this machine and a ``default`` queue."""
    from flotilla.backends.local import LocalBackend
    from flotilla.service.fleet import LOCAL_LABEL, OWNER_LABEL, describe_nodes, local_owner
    from flotilla.service.records import cluster_spec_from_inventory

    owner = local_owner(state_dir)
    _refuse_foreign_owner(store, cluster, state_dir)
    backend = LocalBackend(cluster=cluster, state_dir=state_dir, run_as=run_as, uid_range=uid_range)
    runtime.backends[cluster] = backend
    nodes = backend.inventory().nodes
    labels = {LOCAL_LABEL: "true", OWNER_LABEL: owner}
    store.upsert_cluster(cluster_spec_from_inventory(cluster, "local", nodes, labels=labels))
    ensure_default_queue(store)
    return [f"cluster {cluster}: {describe_nodes(nodes)}"]


def register(app: typer.Typer) -> None:
    app.command()(up)
