"""``flotilla logs``: a run's output, both streams by default, followed with -f."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from flotilla.cli.client import ServerOption, api, fail
from flotilla.cli.jobs import JobArgument
from flotilla.sdk.connection import DEFAULT_SERVER

if TYPE_CHECKING:
    pass


def logs(
    job_ref: JobArgument,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Wait for a queued job to start, then follow until it ends."
        ),
    ] = False,
    stdout_only: Annotated[bool, typer.Option("--stdout", help="Standard output only.")] = False,
    stderr_only: Annotated[bool, typer.Option("--stderr", help="Standard error only.")] = False,
    attempt: Annotated[
        int | None, typer.Option(help="The run of this attempt (default: the latest).", min=1)
    ] = None,
    task: Annotated[str | None, typer.Option(help="Task name (default: the first).")] = None,
    replica: Annotated[int | None, typer.Option(help="Replica index.", min=0)] = None,
    server: ServerOption = DEFAULT_SERVER,
) -> None:
    """Print a job's output: standard output here, standard error to standard error, both
    by default. With -f, keep printing as the run writes until it ends."""
    if stdout_only and stderr_only:
        fail("give --stdout or --stderr, not both (both streams is the default)", code=2)
    from flotilla.sdk.calls import LogSelection

    streams = ("stdout",) if stdout_only else ("stderr",) if stderr_only else ("stdout", "stderr")
    selection = LogSelection(attempt=attempt, task=task, replica=replica)
    targets = {"stdout": sys.stdout, "stderr": sys.stderr}
    with api(server) as client:
        try:
            for output in client.logs(job_ref, follow=follow, streams=streams, selection=selection):
                target = targets[output.stream]
                target.write(output.text)
                target.flush()
        except KeyboardInterrupt:
            return


def register(app: typer.Typer) -> None:
    app.command()(logs)
