"""A run's reported checkpoints (issue 28): ``runs.last_checkpoint_at``.

The backend reads when a job last said "checkpointed now" (``flotilla.checkpoint()``); the
service keeps it on the job's active run and gives the job a new serial, so every JobDb (and
with it victim selection) sees it. No event is written: a job may checkpoint every minute.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from flotilla.store.bulk import update_rows
from flotilla.store.cycle import JOBS, RUNS, lock
from flotilla.store.jobs import reserve_serials
from flotilla.store.protocol import CheckpointReport
from flotilla.store.states import ACTIVE_JOB_STATES, JobState


def record(session: Session, reports: Sequence[CheckpointReport], now: datetime) -> None:
    """Write each report on its run while that run is its job's active run; the latest
    report of a run wins."""
    latest: dict[str, CheckpointReport] = {}
    for report in reports:
        held = latest.get(report.run_id)
        if held is None or report.at > held.at:
            latest[report.run_id] = report
    serial = reserve_serials(session, len(latest))
    locked = lock(session, {report.job_id for report in latest.values()}, attempts=False)
    runs: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    for report in latest.values():
        job = locked.jobs[report.job_id]
        if job["run_id"] != report.run_id or JobState(job["state"]) not in ACTIVE_JOB_STATES:
            continue
        if any(row["id"] == report.job_id for row in jobs):
            continue
        runs.append({"id": report.run_id, "last_checkpoint_at": report.at})
        jobs.append({"id": report.job_id, "serial": serial, "updated_at": now})
        serial += 1
    update_rows(session, RUNS, runs, key="id")
    update_rows(session, JOBS, jobs, key="id")
