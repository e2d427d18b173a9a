"""Hold and release routes (Slurm's ``scontrol hold`` / ``release``): a queued job held is
passed by the scheduler until released. Whoever may cancel a job may hold and release it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from flotilla.api.schemas import HoldBody, Job
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
