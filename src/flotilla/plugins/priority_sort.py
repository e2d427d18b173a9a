"""QueueSort: higher priority first, then earlier submission."""

from __future__ import annotations

from typing import Any

from flotilla.framework.jobs import SchedulingJob


class PrioritySort:
    name = "priority-sort"

    def sort_key(self, job: SchedulingJob) -> tuple[Any, ...]:
        return (-job.priority, job.submit_time, job.sequence)
