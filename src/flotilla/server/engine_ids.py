"""The engine's own ids of a job's run (``flotilla describe``): the Ray submission ids, the
Slurm job id, the Kubernetes Job name, a local run's process group — whatever a person needs
to find the run with the engine's own tools. Asked of the run's backend in this process, as
logs are; never a path on the server."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from flotilla.api.schemas import EngineIds, EngineReplica
from flotilla.backends.interface import BackendError, UnknownRun
from flotilla.server.context import Caller, Context, find_job, require_read
from flotilla.server.errors import ApiError
from flotilla.server.history import run_of
from flotilla.server.jobs import JobReference

router = APIRouter(prefix="/v1", tags=["jobs"])


@router.get("/jobs/{job_id}/engine-ids")
def engine_ids(
    job_id: JobReference,
    context: Context,
    user: Caller,
    attempt: Annotated[
        int | None, Query(ge=1, le=1_000_000, description="The run's attempt (default: latest).")
    ] = None,
) -> EngineIds:
    """The run's replicas (the latest run, or ``attempt``) with the engine's id of each, from
    its cluster's backend; 404 when no scheduler runs in this process or the engine no longer
    knows the run, 503 when the engine cannot be asked now."""
    job = find_job(context, user, job_id)
    require_read(user, job)
    run = run_of(context, job, attempt)
    if context.scheduler is None:
        raise ApiError(
            404,
            "engine ids come from the scheduler's backends, and no scheduler runs in this "
            "server process (start it with `flotilla up`)",
        )
    try:
        status = context.scheduler.run_status(job.id, run.id)
    except UnknownRun:
        raise ApiError(
            404, f"the backend of cluster {run.cluster!r} no longer knows run {run.id}"
        ) from None
    except BackendError as error:
        raise ApiError(503, f"cluster {run.cluster!r} cannot be asked now: {error}") from None
    return EngineIds(
        run_id=run.id,
        attempt=run.attempt,
        cluster=run.cluster,
        replicas=[
            EngineReplica(task=r.task, replica=r.replica, node=r.node, engine_id=r.engine_id)
            for r in status.replicas
        ],
    )
