"""Checkpoints the backends report (issue 28): a run's ``last_checkpoint_at`` kept in the store.

A job reports "checkpointed now" with ``flotilla.checkpoint()``; its backend reports the time
on the run's status (``RunStatus.last_checkpoint_at``). What is newer than the time the store
holds for the job's active run is written there (``Store.record_checkpoints``); the snapshot
hands it to victim selection (``RunningJob.last_checkpoint_at``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from flotilla.backends.interface import RunStatus
from flotilla.jobdb import JobDb
from flotilla.store import ACTIVE_JOB_STATES, CheckpointReport


def new_checkpoints(jobdb: JobDb, statuses: Sequence[RunStatus]) -> list[CheckpointReport]:
    """The statuses' checkpoints that are news: about the job's active run, and later than
    the one the JobDb holds for it."""
    reports: list[CheckpointReport] = []
    txn = jobdb.read_txn()
    for status in statuses:
        if status.last_checkpoint_at is None:
            continue
        job = txn.get(status.job)
        if job is None or job.run is None or job.run.id != status.run_id:
            continue
        if job.state not in ACTIVE_JOB_STATES:
            continue
        at = datetime.fromtimestamp(status.last_checkpoint_at, UTC)
        held = job.run.last_checkpoint_at
        if held is not None and at <= held:
            continue
        reports.append(CheckpointReport(job.id, status.run_id, at))
    return reports
