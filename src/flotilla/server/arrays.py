"""Array routes: show, wait for and cancel a job array as one (its elements are jobs)."""

from __future__ import annotations

from collections import Counter
from typing import Annotated

from fastapi import APIRouter, Body

from flotilla.api.schemas import ArrayDetail, CancelBody, CancelResult, Job
from flotilla.server.auth import User
from flotilla.server.context import Caller, Context, ServerContext
from flotilla.server.errors import ApiError
from flotilla.server.jobs import require_cancel
from flotilla.store import (
    TERMINAL_JOB_STATES,
    AmbiguousJobError,
    JobRecord,
    JobState,
    NotFoundError,
)

router = APIRouter(prefix="/v1", tags=["arrays"])


def elements(context: ServerContext, user: User, reference: str) -> list[JobRecord]:
    """Every element of the array ``reference`` names (its id or an unambiguous prefix), by
    index: 404 when there is no such array, or when the caller may not read its jobs (one
    queue, one owner, the same answer for every element); 409 when the prefix fits several
    arrays, naming none of them (some may be in queues the caller may not read)."""
    try:
        array_id = context.store.find_array(reference)
    except NotFoundError:
        raise ApiError(404, f"no such array: {reference}") from None
    except AmbiguousJobError:
        raise ApiError(
            409, f"{reference!r} is the start of several array ids: give more of it"
        ) from None
    found: list[JobRecord] = []
    after: int | None = None
    while True:
        page = context.store.list_jobs(array_id=array_id, after=after, limit=1000)
        found.extend(page.jobs)
        if page.next_cursor is None:
            break
        after = page.next_cursor
    if not found or not user.may_read(found[0].queue, found[0].owner or ""):
        raise ApiError(404, f"no such array: {array_id}")
    return sorted(found, key=lambda job: job.array_index or 0)


@router.get("/arrays/{array_id}")
def get_array(array_id: str, context: Context, user: Caller) -> ArrayDetail:
    """The array's elements and their counts by state; needs read access to its jobs."""
    jobs = elements(context, user, array_id)
    first = jobs[0]
    array_id = first.array_id or array_id
    array = first.spec.array
    suffix = f"-{first.array_index}"
    return ArrayDetail(
        id=array_id,
        name=first.name.removesuffix(suffix),
        queue=first.queue,
        size=array.size if array is not None else len(jobs),
        parallelism=array.parallelism if array is not None else None,
        counts=dict(Counter(job.state.value for job in jobs)),
        jobs=[Job.from_record(job) for job in jobs],
    )


@router.post("/arrays/{array_id}/cancel")
def cancel_array(
    array_id: str,
    context: Context,
    user: Caller,
    body: Annotated[CancelBody | None, Body()] = None,
) -> CancelResult:
    """Cancel every unfinished element: waiting ones at once, active ones when their runs
    have stopped. Idempotent."""
    jobs = elements(context, user, array_id)
    require_cancel(user, jobs[0])
    open_jobs = [job.id for job in jobs if job.state not in TERMINAL_JOB_STATES]
    records = context.store.cancel_many(open_jobs, (body or CancelBody()).reason)
    context.cancelled(records)
    done = [job for job in records if job.state is JobState.CANCELLED or job.cancel_requested]
    return CancelResult(cancelled=[Job.from_record(job) for job in done])
