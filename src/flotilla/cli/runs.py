"""``flotilla runs`` (also ``flotilla sacct``): the per-run report Slurm users know from
``sacct`` — for each run of the selected jobs its queue, owner, state, exit code, nodes,
elapsed time, CPU time, peak memory and GPU use, where its backend measured them (``-``
where it did not: ``docs/cli.md``)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from flotilla.cli.client import ServerOption, api, fail
from flotilla.cli.output import Output, OutputOption, emit
from flotilla.cli.render import console, duration, short_id, state_text
from flotilla.lifecycle.states import RunState
from flotilla.model.quantity import format_quantity
from flotilla.sdk.connection import DEFAULT_SERVER

if TYPE_CHECKING:
    from rich.table import Table

    from flotilla.api.schemas import RunUse, RunUseReport

RUN_STATES = tuple(state.value for state in RunState)


def runs(
    since: Annotated[
        str,
        typer.Option(
            help="Runs active at or after this: a duration ago (90m, 12h, 7d) or an ISO 8601 time."
        ),
    ] = "1d",
    queue: Annotated[
        list[str] | None, typer.Option("--queue", "-q", help="Only this queue (repeat).")
    ] = None,
    owner: Annotated[
        str | None, typer.Option("--owner", "--user", "-u", help="Only this owner's jobs.")
    ] = None,
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state", "-s", help="Only runs in this state (repeat): " + ", ".join(RUN_STATES) + "."
        ),
    ] = None,
    limit: Annotated[int, typer.Option(help="The newest this many runs.", min=1)] = 1000,
    as_json: Annotated[bool, typer.Option("--json", help="The same as --format json.")] = False,
    output: OutputOption = Output.TABLE,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Each run of your readable jobs (like Slurm's sacct), oldest first: state, exit code,
    nodes, elapsed, CPU time, peak memory (MAXRSS) and GPU use; '-' where not measured."""
    unknown = [name for name in state or () if name not in RUN_STATES]
    if unknown:
        fail(f"--state: {', '.join(unknown)} is not a run state ({', '.join(RUN_STATES)})", code=2)
    with api(server) as client:
        report = client.runs(since, tuple(queue or ()), owner, tuple(state or ()), limit)
    if emit(report, Output.JSON if as_json else output):
        return
    if not report.runs:
        console().print(f"no runs since {report.since:%Y-%m-%d %H:%M:%S}Z")
        return
    console().print(runs_table(report, wide=output is Output.WIDE))


def runs_table(report: RunUseReport, wide: bool = False) -> Table:
    """One row per run: ``JOB.ATTEMPT`` as sacct's ``JOBID.STEP``; ``wide``: full ids, the
    cluster and the start and end times."""
    from rich.table import Table

    title = f"{len(report.runs)} run(s) since {report.since:%Y-%m-%d %H:%M:%S}Z"
    table = Table(title=title, box=None, pad_edge=False, header_style="bold")
    table.add_column("JOB")
    table.add_column("NAME")
    table.add_column("QUEUE")
    table.add_column("OWNER")
    table.add_column("STATE")
    table.add_column("EXIT", justify="right")
    table.add_column("NODES")
    table.add_column("ELAPSED", justify="right")
    table.add_column("CPU", justify="right")
    table.add_column("MAXRSS", justify="right")
    table.add_column("GPU", justify="right")
    if wide:
        table.add_column("CLUSTER")
        table.add_column("STARTED")
        table.add_column("FINISHED")
    for run in report.runs:
        cells = [
            f"{run.job if wide else short_id(run.job)}.{run.attempt}",
            run.name,
            run.queue,
            run.owner or "-",
            state_text(run.state),
            "-" if run.exit_code is None else str(run.exit_code),
            ",".join(run.nodes) or "-",
            duration(run.elapsed_seconds),
            duration(run.cpu_seconds),
            "-" if run.memory_peak is None else format_quantity("memory", run.memory_peak),
            gpu_text(run),
        ]
        if wide:
            cells += [run.cluster, _time(run.started_at), _time(run.finished_at)]
        table.add_row(*cells)
    return table


def gpu_text(run: RunUse) -> str:
    """The GPU memory peak and efficiency (used over held) of a sampled run, else ``-``."""
    use = run.gpu
    if use is None:
        return "-"
    peak = format_quantity("memory", use.memory_peak)
    return peak if use.efficiency is None else f"{peak} {use.efficiency:.0%}"


def _time(moment: datetime | None) -> str:
    return "-" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S}"


def register(app: typer.Typer) -> None:
    app.command()(runs)
    app.command("sacct", hidden=True)(runs)  # what a Slurm user types first
