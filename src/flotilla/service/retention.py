"""Finished jobs leave the scheduler's memory after a retention; the store keeps them.

The JobDb holds what the loop needs to schedule and to follow runs: queued and active jobs.
A finished job is only kept for a while (``retention`` seconds after it ended), so that a late
report about its run still finds it; after that it is dropped from the JobDb, and the JobDb's
size follows the live jobs, not every job ever submitted. Reads of old jobs (the API, the
CLI, the dashboard) come from the store, which keeps the whole history.

Cost: O(jobs dropped) per sweep. Finished jobs are remembered in the order they ended (fed by
the change feed), so a sweep pops the expired ones from the front instead of scanning the
JobDb.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable

from flotilla.jobdb import JobDb
from flotilla.store import TERMINAL_JOB_STATES, JobRecord, Store

DEFAULT_RETENTION_SECONDS = 300.0


class FinishedJobs:
    """Drops finished jobs from a JobDb ``retention`` seconds after they ended."""

    def __init__(self, retention: float, clock: Callable[[], float] = time.time) -> None:
        if retention < 0:
            raise ValueError(f"retention: must be >= 0 seconds, got {retention:g}")
        self.retention = retention
        self._clock = clock
        self._jobdb = JobDb()
        self._ended: deque[tuple[float, str, int]] = deque()
        """(when it ended, job id, serial of that version), about oldest first (the change
        feed's order: by serial)."""

    def load(self, store: Store) -> JobDb:
        """The JobDb of the store's jobs, without those that ended longer than the retention
        ago; this object sweeps it from now on."""
        self._jobdb = JobDb.load(store, keep=self.keep)
        self._ended.clear()
        self.observe(sorted(self._jobdb.read_txn(), key=lambda record: record.updated_at))
        return self._jobdb

    def keep(self, record: JobRecord) -> bool:
        """Whether the JobDb should hold ``record`` at all: not a job that ended longer than
        the retention ago (on a restart, or a sync after a long pause)."""
        return (
            record.state not in TERMINAL_JOB_STATES
            or record.updated_at.timestamp() >= self._clock() - self.retention
        )

    def observe(self, records: Iterable[JobRecord]) -> None:
        """Remember the finished ones among records the JobDb just applied (oldest first)."""
        for record in records:
            if record.state in TERMINAL_JOB_STATES and self.keep(record):
                self._ended.append((record.updated_at.timestamp(), record.id, record.serial))

    def sweep(self) -> int:
        """Drop the jobs that ended more than the retention ago and have not changed since;
        how many were dropped."""
        horizon = self._clock() - self.retention
        ended = self._ended
        expired: list[str] = []
        read = self._jobdb.read_txn()
        while ended and ended[0][0] < horizon:
            _, job_id, serial = ended.popleft()
            held = read.get(job_id)
            if held is not None and held.serial == serial:
                expired.append(job_id)
        if expired:
            with self._jobdb.write_txn() as txn:
                txn.delete(expired)
        return len(expired)

    def __len__(self) -> int:
        """Finished jobs remembered (at most the ones that ended within the retention)."""
        return len(self._ended)
