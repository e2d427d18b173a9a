"""What-if from the live fleet: its export as a scenario (admin) and each waiting job's
estimated start from the service's projection (``service/projection.py``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from flotilla.api.schemas import StartEstimate
from flotilla.server.context import Caller, Context, ServerContext, require_admin
from flotilla.server.errors import ApiError
from flotilla.service.projection import EstimatedStart
from flotilla.store import WAITING_JOB_STATES, JobRecord, JobState
from flotilla.whatif.estimator import EstimatorMethod
from flotilla.whatif.export import ExportInput, export_scenario

router = APIRouter(prefix="/v1")


@router.get("/fleet/scenario", tags=["fleet"])
def export_live_scenario(
    context: Context, user: Caller, runtimes: EstimatorMethod = EstimatorMethod.AUTO
) -> dict[str, Any]:
    """The live fleet and its workload as a scenario (admin): clusters with their current
    nodes, queues, quotas, priority classes, settings; running jobs placed where they run,
    waiting and held ones in submission order, each with its runtime estimate and its source
    (``runtimes``: auto = max_runtime, else history). Payloads and secrets are never in it."""
    require_admin(user, "export the fleet")
    scheduling = context.projection.scheduling if context.projection is not None else None
    request = ExportInput(context.store, datetime.now(UTC), runtimes, scheduling)
    return export_scenario(request).scenario


class Projected(BaseModel):
    projected_at: datetime | None = Field(
        description="When the latest projection's export was taken; null before the first."
    )
    basis: dict[str, str] = Field(default={}, description="By estimator: the runtimes assumed.")
    starts: dict[str, dict[str, datetime | None]] = Field(
        default={},
        description="By estimator, job id → expected start (null: not within the horizon).",
    )


@router.get("/projection", tags=["jobs"])
def latest_projection(context: Context, user: Caller) -> Projected:
    """Every waiting job's expected start in the service's latest projection (admin); 404
    when no projection runs in this process."""
    require_admin(user, "read the projection")
    if context.projection is None:
        raise ApiError(404, "no projection runs in this process (flotilla up runs one)")
    found = context.projection.all_starts()
    if found is None:
        return Projected(projected_at=None)
    return Projected(projected_at=found.projected_at, basis=found.basis, starts=found.starts)


def start_estimate(context: ServerContext, job: JobRecord) -> StartEstimate | None:
    """A waiting job's expected start, from the projection of this process if any."""
    if context.projection is None or job.state not in WAITING_JOB_STATES:
        return None
    found = context.projection.estimated_start(job.id)
    if found is None:
        return None
    return StartEstimate(
        start=found.start,
        projected_at=found.projected_at,
        horizon_seconds=found.horizon,
        method=found.method.value,
        basis=found.basis,
        runtime_seconds=found.runtime.seconds,
        runtime_source=found.runtime.source.value,
        runtime_basis=found.runtime.basis,
        others=dict(found.others),
        summary=start_words(found, datetime.now(UTC)),
    )


def start_unknown(context: ServerContext, job: JobRecord) -> str | None:
    """Why a job that waits (or is held) has no estimated start, in words, so that no waiting
    job shows nothing (as ``squeue --start`` prints ``N/A`` and a reason); None when it has
    one or does not wait."""
    if job.state is JobState.HELD:
        return "unknown: held, it starts only once released (flotilla release)"
    if job.state not in WAITING_JOB_STATES:
        return None
    projection = context.projection
    if projection is None:
        return "unknown: no projection runs beside this server (flotilla up projects starts)"
    if projection.estimated_start(job.id) is not None:
        return None
    at = projection.projected_at()
    if at is None:
        return "unknown: not projected yet (the first projection is under way)"
    if job.submitted_at >= at:
        return (
            f"unknown: not projected yet (submitted after the projection of {at:%H:%M:%S} UTC;"
            f" the next one comes within {projection.settings.interval:g} s)"
        )
    return f"unknown: not in the projection of {at:%H:%M:%S} UTC (it waits on what it cannot see)"


def start_words(found: EstimatedStart, now: datetime) -> str:
    """``expected to start in about 40 min (projection of 12:03 UTC; runtimes from history)``."""
    basis = f"(projection of {found.projected_at:%H:%M} UTC; {found.basis})"
    if found.start is None:
        return f"not expected to start within {_span(found.horizon)} {basis}"
    ahead = (found.start - now).total_seconds()
    if ahead < 60:
        return f"expected to start within a minute {basis}"
    return f"expected to start in about {_span(ahead)} {basis}"


def _span(seconds: float) -> str:
    if seconds < 3600:
        return f"{round(seconds / 60)} min"
    if seconds < 2 * 86400:
        hours = seconds / 3600
        return f"{hours:.1f} h" if hours < 10 else f"{round(hours)} h"
    return f"{seconds / 86400:.1f} d"
