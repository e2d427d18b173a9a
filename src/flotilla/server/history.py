"""A job's past and present: events (and their live stream), logs, and why it waits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from flotilla.api.schemas import Event, LogChunk, QuotaLevel, Why
from flotilla.backends.interface import LogsRequest, LogStream, UnknownReplica, UnknownRun
from flotilla.model import QuotaSpec
from flotilla.server.context import Caller, Context, ServerContext, find_job, require_read
from flotilla.server.errors import ApiError
from flotilla.server.jobs import JobReference, gang_members, pending_reason, unmet_dependencies
from flotilla.server.whatif import start_estimate, start_unknown
from flotilla.store import (
    TERMINAL_JOB_STATES,
    WAITING_JOB_STATES,
    JobRecord,
    JobState,
    RunRecord,
)

router = APIRouter(prefix="/v1", tags=["jobs"])


@router.get("/jobs/{job_id}/events")
def job_events(job_id: JobReference, context: Context, user: Caller) -> list[Event]:
    """The job's history, oldest first: submission, every transition, cancel requests."""
    job = find_job(context, user, job_id)
    require_read(user, job)
    return [Event.from_record(event) for event in context.store.events(job.id)]


def _sse(kind: str, data: str, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: {data}\n\n"


async def _event_stream(
    context: ServerContext, request: Request, job_id: str, last_seen: int
) -> AsyncIterator[str]:
    """History after ``last_seen``, then new events as they are committed, until terminal.

    Reads the job's state before its events: the event of a state change commits with it, so
    a terminal state read first guarantees its event is in the read that follows.
    """
    while True:
        job = await run_in_threadpool(context.store.get_job, job_id)
        events = await run_in_threadpool(context.store.events, job_id)
        for event in events:
            if event.id > last_seen:
                last_seen = event.id
                yield _sse("job-event", Event.from_record(event).model_dump_json(), event.id)
        if job.state in TERMINAL_JOB_STATES:
            yield _sse("end", json.dumps({"state": job.state.value}))
            return
        if await request.is_disconnected():
            return
        await asyncio.sleep(context.poll_interval)


def _event_number(last_event_id: str | None) -> int:
    """``Last-Event-ID`` is any string by the SSE standard; one that is not an id this
    server sent (a number) resumes from the start."""
    text = (last_event_id or "").strip()
    return int(text) if text.isdigit() and len(text) < 19 else 0


async def _counted(
    context: ServerContext, client: str, stream: AsyncIterator[str]
) -> AsyncIterator[str]:
    """``stream``, counted as open until it ends or the client goes away."""
    try:
        async for item in stream:
            yield item
    finally:
        context.close_stream(client)


@router.get(
    "/jobs/{job_id}/events/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def stream_job_events(
    job_id: JobReference,
    request: Request,
    context: Context,
    user: Caller,
    last_event_id: Annotated[str | None, Header(max_length=64)] = None,
) -> StreamingResponse:
    """Server-sent events: ``job-event`` for each history line (history first, then live
    changes), then one ``end`` when the job is terminal. Resumes after ``Last-Event-ID``."""
    job = await run_in_threadpool(find_job, context, user, job_id)  # 404 before the stream
    require_read(user, job)
    client = request.client.host if request.client else "unknown"
    context.open_stream(client)
    resume = _event_number(last_event_id)
    stream = _counted(context, client, _event_stream(context, request, job.id, resume))
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


@router.get("/jobs/{job_id}/logs")
def job_logs(
    job_id: JobReference,
    context: Context,
    user: Caller,
    stream: LogStream = LogStream.STDOUT,
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
    task: Annotated[str | None, Query(max_length=253)] = None,
    replica: Annotated[int | None, Query(ge=0, le=1_000_000)] = None,
    limit: Annotated[int, Query(ge=1, le=1 << 20)] = 1 << 16,
    attempt: Annotated[
        int | None, Query(ge=1, le=1_000_000, description="The run's attempt (default: latest).")
    ] = None,
) -> LogChunk:
    """A chunk of a run's output (the latest run, or ``attempt``) from its cluster's backend.
    Follow by passing ``next_offset`` back as ``offset`` until ``complete``."""
    job = find_job(context, user, job_id)
    require_read(user, job)
    run = run_of(context, job, attempt)
    if context.scheduler is None:
        raise ApiError(
            404,
            "logs come from the scheduler's backends, and no scheduler runs in this server "
            "process (start it with `flotilla up`)",
        )
    request = LogsRequest(run.id, stream, offset, task, replica, limit)
    try:
        chunk = context.scheduler.logs(job.id, request)
    except UnknownRun:
        raise ApiError(
            404, f"the backend of cluster {run.cluster!r} has no logs for run {run.id}"
        ) from None
    except UnknownReplica as error:
        raise ApiError(404, str(error)) from None
    except ValueError as error:
        raise ApiError(400, str(error)) from None
    return LogChunk(
        run_id=chunk.run_id,
        stream=chunk.stream.value,
        offset=chunk.offset,
        next_offset=chunk.next_offset,
        data=chunk.text,
        complete=chunk.complete,
    )


def run_of(context: ServerContext, job: JobRecord, attempt: int | None) -> RunRecord:
    """The job's run of that attempt (default: its latest); 404 naming what is missing."""
    if job.run is None:
        raise ApiError(404, f"job {job.id} has no run yet: it has not been scheduled")
    if attempt is None or attempt == job.run.attempt:
        return job.run
    for run in context.store.runs(job.id):
        if run.attempt == attempt:
            return run
    raise ApiError(404, f"job {job.id} has no attempt {attempt}: its latest is {job.run.attempt}")


def quota_path(roots: list[QuotaSpec], name: str) -> list[QuotaSpec]:
    """The quotas from a root down to ``name``; empty if it is not in the forest."""
    for root in roots:
        if root.name == name:
            return [root]
        below = quota_path(list(root.children), name)
        if below:
            return [root, *below]
    return []


def _summary(job: JobRecord, reason: str, position: int | None, depth: int) -> str:
    if job.state is JobState.QUEUED:
        place = f"{position} of {depth} queued in {job.queue}" if position else "queued"
        return f"job {job.name} is {place}: {reason}"
    if job.state is JobState.PREEMPTED:
        return f"job {job.name} was preempted and waits to be requeued: {reason}"
    if job.state is JobState.HELD:
        return f"job {job.name} is held ({reason}): flotilla release {job.id[:8]} lets it run"
    where = f" on cluster {job.run.cluster}" if job.run is not None else ""
    stop = " (cancel requested)" if job.cancel_requested else ""
    return f"job {job.name} is {job.state.value}{where}{stop}: {reason}"


@router.get("/jobs/{job_id}/why")
def why(job_id: JobReference, context: Context, user: Caller) -> Why:
    """Why is this job waiting: its state and reason, its place in its queue, the quota
    its queue draws on (root first), and its queue's standing in the last cycle."""
    store = context.store
    job = find_job(context, user, job_id)
    require_read(user, job)
    reason = pending_reason(context, job) or job.reason
    members = gang_members(context, job)
    if members is not None and members.waiting:  # a running gang whose other replicas wait
        reason = members.waiting
    _, waiting_for = unmet_dependencies(context, job)
    position = store.queue_position(job.id)
    depth = store.job_counts().get(job.queue, {}).get(JobState.QUEUED.value, 0)
    queue = store.get_queue(job.queue)
    path = quota_path(store.list_quotas(), queue.quota) if queue.quota else []
    levels = [
        QuotaLevel(
            name=quota.name,
            min=dict(quota.min),
            max=None if quota.max is None else dict(quota.max),
            lending_limit=None if quota.lending_limit is None else dict(quota.lending_limit),
            weight=quota.weight,
        )
        for quota in path
    ]
    cycle = context.scheduler.last_cycle() if context.scheduler is not None else None
    return Why(
        job_id=job.id,
        name=job.name,
        queue=job.queue,
        state=job.state.value,
        waiting=job.state in WAITING_JOB_STATES,
        reason=reason,
        cancel_requested=job.cancel_requested,
        queue_position=position,
        queued_in_queue=depth,
        quota=levels,
        queue_running=None if cycle is None else cycle.running_by_queue.get(job.queue),
        queue_dominant_share=None if cycle is None else cycle.dominant_share.get(job.queue),
        summary=_summary(job, reason, position, depth),
        waiting_for=waiting_for,
        estimated_start=start_estimate(context, job),
        start_unknown=start_unknown(context, job),
    )
