"""Job arrays in the CLI: an array id where a job id is expected stands for its elements."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

from flotilla.cli.client import Api, ApiFailure
from flotilla.cli.render import console, jobs_table


def job_or_array(client: Api, ident: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``(job, None)`` when ``ident`` is a job id, ``(None, array)`` when it is an array id;
    a job that does not exist and no array of that id either is the server's 404."""
    try:
        return client.get(f"/v1/jobs/{ident}"), None
    except ApiFailure as error:
        if error.status != 404:
            raise
        try:
            return None, client.get(f"/v1/arrays/{ident}")
        except ApiFailure as array_error:
            if array_error.status == 404:
                raise error from None  # "no such job": the id was most likely meant as one
            raise


def element_ids(client: Api, idents: list[str]) -> list[str]:
    """Job ids, each array id replaced by its elements' ids."""
    found: list[str] = []
    for ident in idents:
        job, array = job_or_array(client, ident)
        if job is not None:
            found.append(job["id"])
        elif array is not None:
            found.extend(element["id"] for element in array["jobs"])
    return found


def cancel_ids(client: Api, ident: str, reason: str) -> list[dict[str, Any]]:
    """Cancel the job ``ident``, or every unfinished element of the array ``ident``."""
    try:
        return [client.post(f"/v1/jobs/{ident}/cancel", json={"reason": reason})]
    except ApiFailure as error:
        if error.status != 404:
            raise
        try:
            done = client.post(f"/v1/arrays/{ident}/cancel", json={"reason": reason})
        except ApiFailure as array_error:
            if array_error.status == 404:
                raise error from None
            raise
        cancelled: list[dict[str, Any]] = done["cancelled"]
        return cancelled


def print_array(array: dict[str, Any]) -> None:
    """``describe`` of an array: its settings, counts by state and elements."""
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    facts.add_row("Array", f"{array['name']}  ({array['id']})")
    facts.add_row("Queue", array["queue"])
    limit = array["parallelism"]
    facts.add_row(
        "Size", f"{array['size']} (at most {limit} at once)" if limit else str(array["size"])
    )
    counts = ", ".join(f"{state} {count}" for state, count in sorted(array["counts"].items()))
    facts.add_row("Elements", counts)
    console().print(Group(facts, jobs_table(array["jobs"])))


def retry_and_array_rows(job: dict[str, Any]) -> list[tuple[str, str]]:
    """``describe``'s lines about a job's array, retry policy and failed attempts."""
    rows: list[tuple[str, str]] = []
    spec = job["spec"]
    if job.get("array_id"):
        size = (spec.get("array") or {}).get("size", "?")
        rows.append(("Array", f"{job['array_id']} (element {job['array_index']} of {size})"))
    retry = spec.get("retry")
    if retry:
        on = ", ".join(retry.get("on", []))
        backoff = retry.get("backoff", "exponential")
        rows.append(("Retry", f"up to {retry['limit']} more attempts on {on}; backoff {backoff}"))
    if job.get("last_failure"):
        rows.append(("Last failure", job["last_failure"]))
    if job.get("not_before"):
        rows.append(("Not before", job["not_before"]))
    return rows
