"""``flotilla hold``, ``release`` and ``requeue`` (Slurm's ``scontrol hold`` / ``release`` /
``requeue``): a queued job held stays out of scheduling until released; a job requeued has
its run stopped and goes back to the queue for a new one. An array id stands for its
elements: those queued are held, those held released, those with a run requeued, the rest
left as they are."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from flotilla.cli.client import ServerOption, api
from flotilla.cli.jobs import JobsArgument
from flotilla.cli.render import console, short_id
from flotilla.sdk.connection import DEFAULT_SERVER

if TYPE_CHECKING:
    from flotilla.api.schemas import Job
    from flotilla.sdk import Client

Reason = Annotated[str, typer.Option(help="Recorded in the job's history (default: who did it).")]


ACTIVE = ("leased", "pending", "running")


def _targets(client: Client, refs: list[str], *states: str) -> list[str]:
    """The jobs ``refs`` name; of an array, its elements in one of ``states``."""
    from flotilla.api.schemas import ArrayDetail
    from flotilla.cli.arrays import job_or_array

    found: list[str] = []
    for ref in refs:
        named = job_or_array(client, ref)
        if isinstance(named, ArrayDetail):
            found.extend(job.id for job in named.jobs if job.state in states)
        else:
            found.append(named.id)
    return found


def _report(changed: list[Job]) -> None:
    for job in changed:
        console().print(f"{short_id(job.id)} {job.name}: {job.state}", highlight=False)


def hold(
    job_refs: JobsArgument, reason: Reason = "", server: ServerOption = DEFAULT_SERVER
) -> None:
    """Keep queued jobs from starting until released (exit 1, naming the job, for one that
    is not queued)."""
    with api(server) as client:
        _report([client.hold(job, reason) for job in _targets(client, job_refs, "queued")])


def release(
    job_refs: JobsArgument, reason: Reason = "", server: ServerOption = DEFAULT_SERVER
) -> None:
    """Let held jobs be scheduled again: each goes back to queued, in its old place."""
    with api(server) as client:
        _report([client.release(job, reason) for job in _targets(client, job_refs, "held")])


def requeue(
    job_refs: JobsArgument, reason: Reason = "", server: ServerOption = DEFAULT_SERVER
) -> None:
    """Stop the runs of leased, pending or running jobs and queue them again for a new run
    (exit 1, naming the job, for one that ended). A queued job is left as it is."""
    with api(server) as client:
        _report([client.requeue(job, reason) for job in _targets(client, job_refs, *ACTIVE)])


def register(app: typer.Typer) -> None:
    app.command()(hold)
    app.command()(release)
    app.command()(requeue)
