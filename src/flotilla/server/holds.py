"""Hold, release and requeue routes (Slurm's ``scontrol hold`` / ``release`` / ``requeue``):
a queued job held is passed by the scheduler until released; a job requeued has its run
stopped and waits in the queue for a new one. Whoever may cancel a job may do all three."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from flotilla.api.schemas import HoldBody, Job
from flotilla.lifecycle.machine import REQUEUE_REQUESTED
from flotilla.server.context import Caller, Context, find_job
from flotilla.server.jobs import JobReference, require_cancel

router = APIRouter(prefix="/v1", tags=["jobs"])


@router.post("/jobs/{job_id}/hold")
def hold_job(
    job_id: JobReference,
    context: Context,
    user: Caller,
    body: Annotated[HoldBody | None, Body()] = None,
) -> Job:
    """Hold a queued job: it stays ``held`` (never started) until released; 409 for a job in
    any other state. Holding a held job changes nothing."""
    job = find_job(context, user, job_id)
    require_cancel(user, job)
    reason = body.reason if body and body.reason else f"held by {user.name}"
    return Job.from_record(context.store.hold_many([job.id], reason)[0])


@router.post("/jobs/{job_id}/release")
def release_job(
    job_id: JobReference,
    context: Context,
    user: Caller,
    body: Annotated[HoldBody | None, Body()] = None,
) -> Job:
    """Release a held job back to ``queued``; 409 for a job in any other state. Releasing a
    queued job changes nothing."""
    job = find_job(context, user, job_id)
    require_cancel(user, job)
    reason = body.reason if body and body.reason else f"released by {user.name}"
    record = context.store.release_many([job.id], reason)[0]
    context.wake()
    return Job.from_record(record)


@router.post("/jobs/{job_id}/requeue")
def requeue_job(
    job_id: JobReference,
    context: Context,
    user: Caller,
    body: Annotated[HoldBody | None, Body()] = None,
) -> Job:
    """Requeue a job that holds a run (leased, pending, running): it becomes ``preempted``
    while its run is stopped, then ``queued`` for a new run (a new attempt). A job waiting
    already (queued, held, preempted) is returned unchanged; 409 for a job that ended or is
    being cancelled."""
    job = find_job(context, user, job_id)
    require_cancel(user, job)
    reason = f"{REQUEUE_REQUESTED} by {user.name}"
    if body and body.reason:
        reason = f"{reason}: {body.reason}"
    record = context.store.requeue_many([job.id], reason)[0]
    context.wake()
    return Job.from_record(record)
