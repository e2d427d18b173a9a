"""``flotilla logs``: a run's output, both streams by default, followed with -f."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from flotilla.cli.client import ServerOption, api, fail
from flotilla.cli.jobs import JobArgument
from flotilla.lifecycle.states import TERMINAL_STATE_NAMES
from flotilla.sdk.connection import DEFAULT_SERVER, POLL

if TYPE_CHECKING:
    from flotilla.sdk import Client

MERGED_STREAMS = frozenset({"kubernetes"})
"""Backends whose engine keeps one log per process (a container log) and return it for both
streams, so reading both would print every line twice (docs/backends.md). Ray's merged log
is its stdout alone (its stderr is empty): both streams are read as for any backend."""


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
            if len(streams) == 2 and _merges_streams(client, job_ref, attempt, follow):
                streams = ("stdout",)
            for output in client.logs(job_ref, follow=follow, streams=streams, selection=selection):
                target = targets[output.stream]
                target.write(output.text)
                target.flush()
        except KeyboardInterrupt:
            return


def _merges_streams(client: Client, job_ref: str, attempt: int | None, follow: bool) -> bool:
    """Whether the run to read ran on a backend that merges stdout and stderr (following a
    queued job waits for its run to know where it runs, as the reader would)."""
    detail = client.get(job_ref)
    while follow and detail.run is None and detail.state not in TERMINAL_STATE_NAMES:
        time.sleep(POLL)
        detail = client.get(detail.id)
    runs = [run for run in detail.runs if attempt is None or run.attempt == attempt]
    if not runs:
        return False  # no run: the reader says so
    cluster = max(runs, key=lambda run: run.attempt).cluster
    backends = {item.name: item.backend for item in client.clusters()}
    return backends.get(cluster) in MERGED_STREAMS


def register(app: typer.Typer) -> None:
    app.command()(logs)
