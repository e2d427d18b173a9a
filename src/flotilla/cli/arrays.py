"""Job arrays in the CLI: an array id where a job is expected stands for its elements."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from flotilla.api.schemas import ArrayDetail, Job, JobDetail
from flotilla.cli.render import console, jobs_table
from flotilla.sdk import Client, NotFound


def job_or_array(client: Client, ref: str) -> JobDetail | ArrayDetail:
    """The job ``ref`` names, else the array of that id; neither: the job's "not found"
    (the reference was most likely meant as a job)."""
    try:
        return client.get(ref)
    except NotFound as missing:
        try:
            return client.array(ref)
        except NotFound:
            raise missing from None


def element_ids(client: Client, refs: list[str]) -> list[str]:
    """Job ids, each array id replaced by its elements' ids."""
    found: list[str] = []
    for ref in refs:
        named = job_or_array(client, ref)
        if isinstance(named, ArrayDetail):
            found.extend(element.id for element in named.jobs)
        else:
            found.append(named.id)
    return found


def cancel_ref(client: Client, ref: str, reason: str) -> list[Job]:
    """Cancel the job ``ref``, or every unfinished element of the array ``ref``."""
    try:
        return [client.cancel(ref, reason)]
    except NotFound as missing:
        try:
            return client.cancel_array(ref, reason)
        except NotFound:
            raise missing from None


def print_array(array: ArrayDetail) -> None:
    """``describe`` of an array: its settings, counts by state and elements."""
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    facts.add_row("Array", f"{array.name}  ({array.id})")
    facts.add_row("Queue", array.queue)
    limit = array.parallelism
    facts.add_row("Size", f"{array.size} (at most {limit} at once)" if limit else str(array.size))
    counts = ", ".join(f"{state} {count}" for state, count in sorted(array.counts.items()))
    facts.add_row("Elements", counts)
    console().print(Group(facts, jobs_table(array.jobs)))


def retry_and_array_rows(job: JobDetail) -> list[tuple[str, str]]:
    """``describe``'s lines about a job's array, retry policy and failed attempts."""
    rows: list[tuple[str, str]] = []
    spec = job.spec
    if job.array_id:
        size = (spec.get("array") or {}).get("size", "?")
        rows.append(("Array", f"{job.array_id} (element {job.array_index} of {size})"))
    retry = spec.get("retry")
    if retry:
        on = ", ".join(retry.get("on", []))
        backoff = retry.get("backoff", "exponential")
        rows.append(("Retry", f"up to {retry['limit']} more attempts on {on}; backoff {backoff}"))
    if job.last_failure:
        rows.append(("Last failure", job.last_failure))
    if job.not_before:
        rows.append(("Not before", f"{job.not_before:%Y-%m-%d %H:%M:%S}"))
    return rows
