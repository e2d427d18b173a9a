"""QueueSort: higher priority first, then earlier submission."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from flotilla.framework.jobs import SchedulingJob

_BY_SUBMISSION = attrgetter("submit_time", "sequence")
_BY_PRIORITY = attrgetter("priority")


class PrioritySort:
    name = "priority-sort"

    def sort_key(self, job: SchedulingJob) -> tuple[Any, ...]:
        return (-job.priority, job.submit_time, job.sequence)

    def sort(self, jobs: list[SchedulingJob]) -> None:
        """Same order as ``sort_key``, with C-level keys: two stable sorts."""
        jobs.sort(key=_BY_SUBMISSION)
        jobs.sort(key=_BY_PRIORITY, reverse=True)
