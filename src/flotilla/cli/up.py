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
    listen_or_fail,
    shown_url,
    submit_hint,
    traces_or_fail,
)
from flotilla.model.modes import Mode

if TYPE_CHECKING:
    from flotilla.app import Service
    from flotilla.model.fleet import Fleet
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
            "each other). Default: as root, each owner (the token's user) gets a uid of its "
            "own (--uid-range); otherwise the user who started the server. Switching user "
            "needs root.",
        ),
    ] = None,
    uid_range: Annotated[
        str | None,
        typer.Option(
            "--uid-range",
            help="As root, without --run-as: the uids owners get one each of, kept in the "
            "database, FIRST-LAST (default 60000-60999; uids with an account are skipped).",
        ),
    ] = None,
    allow_working_dir: Annotated[
        list[Path] | None,
        typer.Option(
            "--allow-working-dir",
            help="An absolute directory local jobs may run in (repeat for more). Default: "
            "this machine's cluster runs a job in any directory it names, the submit "
            "directory of `run` and `submit` included, entered as the job's user.",
        ),
    ] = None,
    accept_open_database: Annotated[
        bool,
        typer.Option(
            "--accept-open-database",
            envvar="FLOTILLA_ACCEPT_OPEN_DATABASE",
            help="Start jobs as other users even though the database lets them in without a "
            "password (a laptop, a throwaway database): any job could then rewrite "
            "Flotilla's state. Without it, `up` refuses to start in that case.",
        ),
    ] = False,
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
    from flotilla.app import ApiConfig, ServiceConfig, StartupError, build_service, settle_process
    from flotilla.service.loop import LoopSettings, default_replica_id
    from flotilla.service.projection import ProjectionSettings

    if api:
        settings, token = auth_or_fail(auth, host)
    traces = traces_or_fail()
    if api:
        listener = listen_or_fail(host, port)  # a port in use: one line, nothing started
        port = listener.getsockname()[1]
    run_as, uid_range = _identities(run_as, uid_range)  # before any database is touched
    _database_out_of_reach(db, run_as, uid_range, accepted=accept_open_database)
    estimators = _projection_methods(projection_runtimes)
    fleet = _read_fleet(fleet_file, state_dir) if fleet_file is not None else None
    config = ServiceConfig(
        db=db,
        loop=LoopSettings(
            mode=mode,
            cycle_interval=cycle_interval,
            replica=replica or default_replica_id(),
            lease_ttl=lease_ttl,
            finished_retention=finished_retention,
            algorithm_process=algorithm_process,
        ),
        state_dir=state_dir,
        cluster=cluster,
        fleet=fleet,
        fleet_source=fleet_file,
        run_as=run_as,
        uid_range=uid_range,
        allowed_working_dirs=_working_dirs(allow_working_dir),
        api=ApiConfig(host=host, port=port, auth=settings, local_token=token) if api else None,
        projection=ProjectionSettings(interval=projection_interval, methods=estimators)
        if api and projection_interval > 0
        else None,
    )
    try:
        service = build_service(config)  # the composition root (src/flotilla/app/)
    except StartupError as error:
        fail(error.message, error.problems, code=2)
    settle_process()
    service.start()
    lines = service.notices
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
    draining = Drain(service.store, service.loop) if drain and api else None
    try:
        try:
            if api:
                service.serve(listener, drain=draining.run if draining is not None else None)
            else:
                _until_stopped(service)
        finally:  # Ctrl-C, or SIGTERM (SystemExit): say what becomes of the running jobs
            if draining is None or not draining.started:
                shut_down(service.store, service.loop, drain)
    finally:
        service.stop()


def _projection_methods(runtimes: str) -> tuple[EstimatorMethod, ...]:
    """``--projection-runtimes`` read, or exit 2 naming it (before anything starts)."""
    from flotilla.whatif.estimator import EstimatorMethod

    try:
        return tuple(EstimatorMethod(name.strip()) for name in runtimes.split(","))
    except ValueError:
        fail(f"--projection-runtimes: {runtimes!r}: give auto, max_runtime or history", code=2)


def _until_stopped(service: Service) -> None:
    """Wait, without an API to serve, for Ctrl-C or SIGTERM (or the scheduler's end)."""
    stopped = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda _number, _frame: stopped.set())
    try:
        while service.scheduling and not stopped.wait(0.5):
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


def _working_dirs(given: list[Path] | None) -> tuple[str, ...] | None:
    """``--allow-working-dir`` as absolute directories (exit 2 naming it otherwise)."""
    if not given:
        return None
    found = []
    for path in given:
        if not path.is_absolute():
            fail(f"--allow-working-dir: {str(path)!r} must be an absolute directory", code=2)
        found.append(os.path.normpath(path))
    return tuple(found)


def _identities(run_as: str | None, uid_range: str | None) -> tuple[str | None, str | None]:
    """Who local runs run as: ``(run_as, uid_range)``. As root without either, the default
    range (a job is anyone who may submit, never root and never a neighbour of another job;
    issue 23) where this machine has cgroups — a run's end kills what they hold, and only
    that (issue 35) — else the one account ``nobody``, said at start. Exit 2 naming the
    option when it cannot be used here."""
    from flotilla.backends.local.environment import check_run_as
    from flotilla.backends.local.identity import DEFAULT_UID_RANGE, parse_uid_range
    from flotilla.backends.local.tree import cgroups_problem

    if run_as is not None and uid_range is not None:
        fail("--uid-range: give either --run-as (one user for every job) or --uid-range", code=2)
    try:
        check_run_as(run_as)
        if uid_range is not None:
            parse_uid_range(uid_range)
            if os.geteuid() != 0:
                raise ValueError("uid_range: giving each run a uid of its own needs root")
            problem = cgroups_problem()
            if problem is not None:
                raise ValueError(
                    f"uid_range: a uid per owner needs cgroups, and this machine "
                    f"gives none ({problem}); use --run-as USER instead"
                )
    except ValueError as error:
        fail(f"--{str(error).replace('_', '-', 1)}", code=2)
    if uid_range is None and run_as is None and os.geteuid() == 0:
        if cgroups_problem() is None:
            return None, "{}-{}".format(*DEFAULT_UID_RANGE)
        return "nobody", None
    return run_as, uid_range


def _database_out_of_reach(
    db: str, run_as: str | None, uid_range: str | None, *, accepted: bool
) -> None:
    """Exit 2 when jobs would run as another uid that can open the database without a
    password (``app/exposure.py``); with ``--accept-open-database``, say so and go on."""
    from flotilla.app.exposure import job_account, open_to

    account = job_account(run_as, uid_range)
    if account is None or open_to(db, account) is not True:
        return
    problem = (
        f"--db {shown_url(db)}: a job (uid {account.uid}) can open this database without a "
        "password, so any job could rewrite Flotilla's state"
    )
    if accepted:
        typer.echo(f"warning: {problem} (accepted: --accept-open-database)", err=True)
        return
    fail(
        problem,
        [
            "give Flotilla's database role a password (in --db or PGPASSWORD) or use peer "
            "authentication over the Unix socket: docs/store.md, 'PostgreSQL for a service'",
            "or run jobs as this user: --run-as " + str(os.getuid()),
            "or accept the risk (a laptop, a throwaway database): --accept-open-database",
        ],
        code=2,
    )


def _runs_as(run_as: str | None, uid_range: str | None) -> str:
    if uid_range is not None:
        return f"a uid of each owner's own (from {uid_range}), shared by that owner's runs"
    if run_as == "nobody" and os.geteuid() == 0:
        from flotilla.backends.local.tree import cgroups_problem

        problem = cgroups_problem()
        if problem is not None:
            return f"nobody, all of them (a uid per owner needs cgroups: {problem})"
    if run_as is None:
        import pwd

        return f"{pwd.getpwuid(os.getuid()).pw_name}, the user who started this server"
    return run_as


def register(app: typer.Typer) -> None:
    app.command()(up)
