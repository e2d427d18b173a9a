"""The recent past of the live fleet, drawn like a simulation: waits per queue, jobs on nodes.

Read from the newest ``limit`` jobs (newest first, one keyset page): each job's wait is the
time from submission to the creation of its first run (jobs on a later attempt are left out,
their first run is not at hand), and each run that started is a bar on every node it placed a
replica on, until it finished (or now).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from flotilla.framework.assignment_record import AssignmentRecord
from flotilla.store import Store

GANTT_MAX_ROWS = 64


def recent_activity(
    store: Store,
    *,
    limit: int = 500,
    now: datetime | None = None,
    may_read: Callable[[str, str | None], bool] = lambda queue, owner: True,
) -> dict[str, Any]:
    """``may_read(queue, owner)``: whether the caller may see that job; a bar of a job they
    may not read keeps its place and time (the fleet's use is no secret) but not its name."""
    now = now or datetime.now(UTC)
    waits: dict[str, list[float]] = {queue.name: [] for queue in store.list_queues()}
    bars: list[dict[str, Any]] = []
    for job in store.list_jobs(newest_first=True, limit=limit).jobs:
        run = job.run
        if run is None:
            continue
        if run.attempt == 1:
            waits.setdefault(job.queue, []).append(
                round((run.created_at - job.submitted_at).total_seconds(), 3)
            )
        if run.started_at is None:
            continue
        end = run.finished_at or now
        for node in sorted(AssignmentRecord.unmarshal(run.assignment).nodes):
            bars.append(
                {
                    "row": f"{run.cluster}/{node}",
                    "start": run.started_at.timestamp(),
                    "end": end.timestamp(),
                    "label": job.name if may_read(job.queue, job.owner) else "(hidden)",
                    "group": job.queue,
                    "preempted": run.state.value == "preempted",
                }
            )
    rows = sorted({bar["row"] for bar in bars})
    return {
        "waits": waits,
        "gantt": {"rows": rows, "bars": bars, "groups": sorted(waits)}
        if len(rows) <= GANTT_MAX_ROWS
        else None,
        "now": now.timestamp(),
    }
