"""Client commands about jobs: submit, jobs, watch, wait, cancel, reprioritize.

A JOB argument is a job id, an unambiguous id prefix (tables show 8 characters), a name (the
latest job of that name) or QUEUE/NAME.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flotilla.cli.client import ServerOption, api, fail
from flotilla.cli.output import Output, OutputOption, emit
from flotilla.cli.render import console, jobs_table, short_id, simulated_clusters
from flotilla.cli.where import Export, parse_export, place_here
from flotilla.lifecycle.states import SUCCESSFUL_STATE_NAMES, TERMINAL_STATE_NAMES, JobState
from flotilla.sdk.connection import DEFAULT_SERVER

if TYPE_CHECKING:
    from flotilla.api.schemas import JobList
    from flotilla.sdk import Client, JobFilter

JobArgument = Annotated[
    str,
    typer.Argument(metavar="JOB", help="Id, id prefix, name (the latest) or QUEUE/NAME."),
]
"""One job (``logs``, ``why``, ``reprioritize``: an array id is not one)."""
JobOrArrayArgument = Annotated[
    str,
    typer.Argument(
        metavar="JOB", help="Id, id prefix, name (the latest), QUEUE/NAME, or a whole array id."
    ),
]
JobsArgument = Annotated[
    list[str],
    typer.Argument(metavar="JOB...", help="Ids, id prefixes, names, QUEUE/NAME, or array ids."),
]


def where(
    body: dict[str, Any], server: str, export: Export, dependency: str | None, hold: bool
) -> None:
    """The submit directory, environment, dependencies and ``--hold-if-unfit`` of the file's
    jobs (``cli/where.py``), in place."""
    from flotilla.cli.sbatch import dependencies

    extra: list[dict[str, str]] = []
    if dependency:
        try:
            extra = dependencies(dependency)
        except ValueError as error:
            fail(f"--dependency: {error}", code=2)
    for job in body.get("jobs", [body]):
        if not isinstance(job, dict):
            continue
        if hold:
            job["hold_if_unfit"] = True
        if extra:
            job["depends_on"] = [*(job.get("depends_on") or []), *extra]
        payload = job.get("payload")
        if job.get("type", "command") == "command" and isinstance(payload, dict):
            place_here(payload, server=server, export=export)


def submit(
    file: Annotated[
        Path,
        typer.Argument(help="Job file (YAML or JSON): one job or a list; - reads standard input."),
    ],
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print only the job ids, one per line.")
    ] = False,
    hold_if_unfit: Annotated[
        bool,
        typer.Option(
            "--hold-if-unfit",
            help="Keep jobs no cluster of the fleet can hold queued, for a fleet that will "
            "grow (by default the server refuses them).",
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Check the file with the server's rules and send nothing (the fleet's queues, "
            "priority classes and clusters are checked at submission).",
        ),
    ] = False,
    dependency: Annotated[
        str | None,
        typer.Option(
            "--dependency",
            "-d",
            help="afterok:JOB[:JOB] (also afterany, afternotok): every job of the file starts "
            "once those ended so. A JOB is an id or a name (its newest job).",
        ),
    ] = None,
    export: Annotated[
        str,
        typer.Option(
            "--export",
            help="ALL (default), NONE or VAR[,VAR=value…]: the submitter's environment command "
            "jobs get, as Slurm's (ALL leaves out credentials and the session's own).",
        ),
    ] = "ALL",
    output_format: OutputOption = Output.TABLE,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Submit the jobs of a file, all or nothing.

    When the server is on this machine, a command job that names no working_dir runs in this
    directory, with this shell's environment below its own env (--export), as sbatch does."""
    from flotilla.api.submission import parse_submission
    from flotilla.sdk.errors import InvalidSpec
    from flotilla.sdk.jobfile import read_job_file, read_job_text

    try:
        # A bad file: exit 2 before any request.
        body = (
            read_job_text(sys.stdin.read(), "<stdin>") if str(file) == "-" else read_job_file(file)
        )
    except InvalidSpec as invalid:
        fail(invalid.message, invalid.problems, code=2)
    if dry_run:
        count = sum(len(spec.job_names()) for spec in parse_submission(body)[0])
        typer.echo(f"{file}: {count} job{'s' if count != 1 else ''} valid; nothing was submitted")
        return
    where(body, server, parse_export(export), dependency, hold_if_unfit)
    with api(server) as client:
        result = client.submit(body)
    if quiet:
        for job in result.jobs:
            typer.echo(job.id)
        return
    if emit(result, output_format):
        return
    from rich.table import Table

    table = Table("ID", "NAME", "QUEUE", box=None, header_style="bold")
    for job in result.jobs:
        table.add_row(job.id, job.name, job.queue)
    count = len(result.jobs)
    console().print(f"submitted {count} job{'s' if count != 1 else ''}")
    console().print(table)
    for array_id in dict.fromkeys(job.array_id for job in result.jobs if job.array_id):
        console().print(f"array {array_id}: describe, wait or cancel it as one", highlight=False)


def _labels(pairs: list[str] | None) -> dict[str, str]:
    labels: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--label: expected key=value, got {pair!r}", code=2)
        labels[key] = value
    return labels


QueueFilter = Annotated[str | None, typer.Option("--queue", "-q", help="Only this queue.")]
StateFilter = Annotated[
    list[str] | None, typer.Option("--state", "-s", help="Only these states (repeat).")
]
OwnerFilter = Annotated[str | None, typer.Option("--owner", help="Only this owner's jobs.")]
LabelFilter = Annotated[
    list[str] | None, typer.Option("--label", "-l", help="key=value; repeat: all must match.")
]
NameFilter = Annotated[
    str | None, typer.Option("--name", "-n", help="Part of the name (any case).")
]
OldestFirst = Annotated[
    bool, typer.Option("--oldest-first", help="Oldest first (default: newest first).")
]


def _filter(
    queue: str | None,
    state: list[str] | None,
    owner: str | None,
    label: list[str] | None,
    name: str | None,
    oldest_first: bool,
) -> JobFilter:
    from flotilla.sdk.calls import JobFilter

    return JobFilter(
        queue=queue,
        states=tuple(state or ()),
        owner=owner,
        labels=_labels(label),
        name=name,
        newest_first=not oldest_first,
    )


def fetch(client: Client, where: JobFilter, limit: int, *, starts: bool = False) -> JobList:
    """Up to ``limit`` jobs, following cursors, and the count of every match (``starts``:
    with each waiting job's estimated start or why it has none)."""
    from flotilla.api.schemas import Job, JobList

    page = client.page(where, limit=min(limit, 1000), total=True, starts=starts)
    shown: list[Job] = list(page.jobs)
    cursor = page.next_cursor
    while cursor is not None and len(shown) < limit:
        more = client.page(where, after=cursor, limit=min(1000, limit - len(shown)), starts=starts)
        shown += more.jobs
        cursor = more.next_cursor
    return JobList(jobs=shown, next_cursor=cursor, total=page.total)


def _title(shown: int, total: int | None) -> str:
    matched = total if total is not None else shown
    if shown == matched:
        return f"{matched} job(s)"
    return f"{shown} of {matched} job(s), newest first"


ACTIVE_STATE_NAMES = tuple(state for state in JobState if state not in TERMINAL_STATE_NAMES)
"""What ``jobs`` lists by default, as ``squeue`` lists the jobs not yet ended."""


def jobs(
    queue: QueueFilter = None,
    state: StateFilter = None,
    every: Annotated[
        bool,
        typer.Option(
            "--all", "-a", help="Finished jobs too (by default only those not yet ended)."
        ),
    ] = False,
    owner: OwnerFilter = None,
    label: LabelFilter = None,
    name: NameFilter = None,
    oldest_first: OldestFirst = False,
    limit: Annotated[int, typer.Option(help="Show at most this many.", min=1)] = 100,
    starts: Annotated[
        bool,
        typer.Option(
            "--start",
            help="A START column: each waiting job's expected start, or N/A and why (as "
            "squeue --start).",
        ),
    ] = False,
    output: OutputOption = Output.TABLE,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """List the jobs not yet ended (with --all, every job), newest first, with the count of
    every match."""
    if not state and not every:
        state = list(ACTIVE_STATE_NAMES)
    where = _filter(queue, state, owner, label, name, oldest_first)
    with api(server) as client:
        found = fetch(client, where, limit, starts=starts)
        tabled = output in (Output.TABLE, Output.WIDE)
        simulated = simulated_clusters(client, found.jobs) if tabled else frozenset()
    if emit(found, output):
        return
    if not found.jobs:
        console().print(
            "no jobs"
            if every or state != list(ACTIVE_STATE_NAMES)
            else "no active jobs (--all: finished ones too)"
        )
        return
    title = _title(len(found.jobs), found.total)
    console().print(
        jobs_table(
            found.jobs,
            title=title,
            wide=output is Output.WIDE,
            simulated=simulated,
            starts=starts,
        )
    )


MIN_INTERVAL = 0.5


def watch(
    queue: QueueFilter = None,
    state: StateFilter = None,
    owner: OwnerFilter = None,
    label: LabelFilter = None,
    name: NameFilter = None,
    interval: Annotated[
        float, typer.Option(help=f"Seconds between refreshes (at least {MIN_INTERVAL}).")
    ] = 2.0,
    limit: Annotated[int, typer.Option(help="Rows shown (the newest matching jobs).", min=1)] = 50,
    iterations: Annotated[
        int | None, typer.Option(help="Stop after this many refreshes (default: until Ctrl-C).")
    ] = None,
    wide: Annotated[bool, typer.Option("--wide", "-w", help="Full ids, cluster, labels.")] = False,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """A live table of jobs, newest first, refreshed every --interval seconds; Ctrl-C stops."""
    from rich.live import Live

    where = _filter(queue, state, owner, label, name, oldest_first=False)
    pause = max(MIN_INTERVAL, interval)
    with api(server) as client:
        shown = 0
        try:
            with Live(console=console(), auto_refresh=False) as live:
                while iterations is None or shown < iterations:
                    found = fetch(client, where, limit)
                    title = (
                        f"{_title(len(found.jobs), found.total)} — every {pause:g}s, Ctrl-C to stop"
                    )
                    live.update(jobs_table(found.jobs, title=title, wide=wide), refresh=True)
                    shown += 1
                    if iterations is None or shown < iterations:
                        time.sleep(pause)
        except KeyboardInterrupt:
            return


def wait(
    job_refs: JobsArgument,
    timeout: Annotated[
        float, typer.Option(help="Give up after this many seconds (exit 3).", min=0)
    ] = 300.0,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Wait until the jobs end; exit 0 if all succeeded (or were skipped: a dependency
    branch not taken), 1 if any did not, 3 on timeout."""
    from flotilla.cli.arrays import element_ids
    from flotilla.sdk.errors import WaitTimeout

    with api(server) as client:
        try:
            ended = client.wait_all(element_ids(client, job_refs), timeout)
        except WaitTimeout as timed_out:
            console().print(timed_out.message, highlight=False)
            raise typer.Exit(3) from None
    for job in ended:
        typer.echo(f"{job.id} {job.state}")
    if any(job.state not in SUCCESSFUL_STATE_NAMES for job in ended):
        raise typer.Exit(1)


def cancel(
    job_refs: Annotated[
        list[str] | None,
        typer.Argument(metavar="JOB...", help="Ids, id prefixes, names, QUEUE/NAME, or array ids."),
    ] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-q", help="Every job of it.")] = None,
    label: LabelFilter = None,
    reason: Annotated[str, typer.Option(help="Recorded in the job's history.")] = (
        "cancelled by user"
    ),
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Cancel jobs, or every unfinished job of a queue and/or with labels."""
    from flotilla.cli.arrays import cancel_ref

    if not job_refs and queue is None and not label:
        fail("name jobs to cancel, or give --queue and/or --label", code=2)
    if job_refs and (queue is not None or label):
        fail("give jobs or --queue/--label, not both", code=2)
    labels = _labels(label)
    with api(server) as client:
        if job_refs:
            done = [job for ref in job_refs for job in cancel_ref(client, ref, reason)]
        else:
            done = client.cancel_matching(queue=queue, labels=labels, reason=reason)
    if not done:
        console().print("nothing to cancel")
    for job in done:
        what = "cancelled" if job.state == "cancelled" else "cancel requested"
        if job.state in TERMINAL_STATE_NAMES - {"cancelled"}:
            what = f"already {job.state}"
        console().print(f"{job.id} {job.name}: {what}", highlight=False)


def reprioritize(
    job: JobArgument,
    priority: Annotated[int, typer.Argument(help="The new priority (higher runs first).")],
    reason: Annotated[str, typer.Option(help="Recorded in the job's history.")] = "",
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Change a waiting job's priority (admin on its queue)."""
    with api(server) as client:
        changed = client.reprioritize(job, priority, reason)
    console().print(
        f"{short_id(changed.id)} {changed.name}: priority {changed.priority}", highlight=False
    )


def register(app: typer.Typer) -> None:
    for command in (submit, jobs, watch, wait, cancel, reprioritize):
        app.command()(command)
