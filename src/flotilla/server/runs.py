"""The per-run report: ``GET /v1/runs`` — each run of the selected jobs with its state, exit
code, nodes, elapsed time, and the CPU time, peak memory and GPU use its backend measured
(``flotilla sacct``, Slurm's ``sacct``). A caller sees the runs of the queues they may read
and of their own jobs elsewhere, as ``GET /v1/usage`` does.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query

from flotilla.api.schemas import RunUse, RunUseReport
from flotilla.server.context import Caller, Context
from flotilla.server.usage import MOMENT_SCHEMA, RANGE_HELP, parse_moment, visibility
from flotilla.store import RunReportQuery, RunState
from flotilla.store.run_report import REPORT_LIMIT

router = APIRouter(prefix="/v1", tags=["accounting"])


@router.get("/runs")
def list_runs(
    context: Context,
    user: Caller,
    since: Annotated[
        str,
        Query(
            max_length=64,
            description=RANGE_HELP + " Runs active at or after it.",
            json_schema_extra=MOMENT_SCHEMA,
        ),
    ] = "1d",
    queue: Annotated[
        list[Annotated[str, Query(max_length=253)]] | None,
        Query(description="Repeat for several."),
    ] = None,
    owner: Annotated[str | None, Query(max_length=253)] = None,
    state: Annotated[
        list[RunState] | None, Query(description="The run's state; repeat for several.")
    ] = None,
    limit: Annotated[
        int, Query(ge=1, le=REPORT_LIMIT, description="The newest this many runs.")
    ] = 1000,
) -> RunUseReport:
    """The runs active at or after ``since`` (created then, or not ended before it), oldest
    first, of the jobs the caller may read. An unknown queue is a 404."""
    now = datetime.now(UTC)
    start = parse_moment(since, now, "since", "invalid run report range")
    for name in queue or ():
        context.store.get_queue(name)  # NotFoundError: 404 naming it
    query = RunReportQuery(
        since=start,
        queues=None if not queue else frozenset(queue),
        owner=owner,
        states=None if not state else frozenset(state),
        limit=limit,
        **visibility(context, user),
    )
    rows = context.store.run_report(query)
    return RunUseReport(since=start, runs=[RunUse.from_row(row, now) for row in rows])
