"""Which queued jobs a snapshot offers the engine now.

Two kinds of queued job are held back: a job waiting out its retry backoff (its stored
``not_before`` is in the future) and an array element over its array's ``parallelism`` (at
most that many elements offered or leased, pending or running at once, Slurm's
``--array=…%K``; the rule is the lifecycle core's ``ArrayThrottle``). Both are kept
incrementally from the JobDb's change feed, so a cycle costs the jobs whose hold ended — a
heap of backoff times, a heap of held elements per throttled array — never a scan of the
backlog.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from datetime import UTC

from flotilla.lifecycle.arrays import ArrayThrottle
from flotilla.store import ACTIVE_JOB_STATES, JobRecord, JobState


class Admission:
    """The holds on queued jobs (see the module docstring). The caller reports every record
    the change feed brings (``observe``), asks before offering a queued job (``admit``), and
    each cycle takes the ids whose hold ended (``released``) to look at them again."""

    def __init__(self) -> None:
        self._backoff: list[tuple[float, str]] = []
        self._arrays: dict[str, ArrayThrottle] = {}
        self._array_of: dict[str, str] = {}
        self._calls = 0

    def reset(self, active: Iterable[JobRecord]) -> None:
        """Start over: ``active`` are the jobs now leased, pending or running."""
        self._backoff.clear()
        self._arrays.clear()
        self._array_of.clear()
        for record in active:
            self.observe(record)

    def _array(self, record: JobRecord) -> ArrayThrottle | None:
        spec = record.spec.array
        if record.array_id is None or spec is None or spec.parallelism is None:
            return None
        found = self._arrays.get(record.array_id)
        if found is None:
            found = self._arrays[record.array_id] = ArrayThrottle(spec.parallelism)
        self._array_of[record.id] = record.array_id
        return found

    def observe(self, record: JobRecord) -> None:
        """A job changed: an element that became active counts against its array."""
        array = self._array(record)
        if array is None:
            return
        if record.state in ACTIVE_JOB_STATES:
            array.activate(record.id)
        else:
            array.deactivate(record.id)
            if record.state is not JobState.QUEUED:
                self.withdraw(record.id)

    def withdraw(self, job_id: str) -> None:
        """The job is no longer offered (it left the queue, or is looked at again)."""
        array = self._arrays.get(self._array_of.get(job_id, ""))
        if array is not None:
            array.leave(job_id)

    def admit(self, record: JobRecord, now: float) -> str | None:
        """``None`` if the queued job may be offered now; else why it is held back (it comes
        back through ``released`` when the hold ends)."""
        if record.not_before is not None and record.not_before.timestamp() > now:
            heapq.heappush(self._backoff, (record.not_before.timestamp(), record.id))
            when = record.not_before.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            return f"waiting out its retry backoff until {when}"
        array = self._array(record)
        if array is None:
            return None
        self.withdraw(record.id)
        if array.offer(record.id, record.array_index or 0):
            return None
        return array.reason(record.array_id or "")

    def released(self, now: float) -> list[str]:
        """Jobs whose hold ended since the last call: backoff over, or room in the array."""
        released: list[str] = []
        while self._backoff and self._backoff[0][0] <= now:
            released.append(heapq.heappop(self._backoff)[1])
        for array in self._arrays.values():
            if array.holds_some:
                released.extend(array.release())
        self._forget_idle()
        return released

    def _forget_idle(self) -> None:
        """Drop arrays with nothing active, admitted or held, now and then (bounded memory)."""
        self._calls += 1
        if self._calls % 1000:
            return
        live = {key for key, array in self._arrays.items() if not array.idle}
        self._arrays = {key: array for key, array in self._arrays.items() if key in live}
        self._array_of = {job: key for job, key in self._array_of.items() if key in live}
