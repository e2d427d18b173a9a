"""Which job to try next: DRF progressive filling across queues, or global FIFO.

DRF (Ghodsi et al., Armada's rule): the next job comes from the queue whose weighted dominant
share, counting that job, would be lowest. Only the chosen queue's share changes when a job is
placed, so a heap keyed on each queue's cost-with-its-head is exact.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.resources import EPSILON, Vector
from flotilla.scheduler.types import QueueInfo


class DrfOrder:
    """Yields jobs in DRF order; the caller reports each outcome with ``placed``/``blocked``."""

    def __init__(
        self,
        queues: Sequence[QueueInfo],
        jobs_by_queue: Mapping[str, list[SchedulingJob]],
        allocated: Mapping[str, Vector],
        total: Vector,
    ) -> None:
        self._jobs = jobs_by_queue
        self._weights = {queue.name: queue.weight for queue in queues}
        self._order = {queue.name: queue.order for queue in queues}
        self._allocated = {name: allocated[name].copy() for name in allocated}
        self._inverse_total = np.divide(1.0, total, out=np.zeros_like(total), where=total > EPSILON)
        self._heads = dict.fromkeys(jobs_by_queue, 0)
        self._heap: list[tuple[float, int, str]] = []
        for name, jobs in jobs_by_queue.items():
            if jobs:
                self._push(name)

    def share(self, queue: str, extra: Vector | None = None) -> float:
        """Weighted dominant share of ``queue``, optionally counting ``extra``."""
        used = self._allocated[queue] if extra is None else self._allocated[queue] + extra
        return float((used * self._inverse_total).max(initial=0.0)) / self._weights[queue]

    def _push(self, queue: str) -> None:
        head = self._jobs[queue][self._heads[queue]]
        heapq.heappush(self._heap, (self.share(queue, head.total), self._order[queue], queue))

    def __iter__(self) -> Iterator[SchedulingJob]:
        while self._heap:
            _, _, queue = heapq.heappop(self._heap)
            self._current = queue
            yield self._jobs[queue][self._heads[queue]]

    def placed(self, job: SchedulingJob) -> None:
        self._allocated[job.queue] += job.total
        self._advance(job.queue)

    def skipped(self, job: SchedulingJob) -> None:
        """The job stays queued; the queue moves on to its next job (best-effort FIFO)."""
        self._advance(job.queue)

    def blocked(self, job: SchedulingJob) -> list[SchedulingJob]:
        """The queue stops for this cycle (strict FIFO); returns the jobs left behind."""
        start = self._heads[job.queue] + 1
        return self._jobs[job.queue][start:]

    def _advance(self, queue: str) -> None:
        self._heads[queue] += 1
        if self._heads[queue] < len(self._jobs[queue]):
            self._push(queue)


class FifoOrder:
    """Global submission order across every queue (``fair_share: fifo``)."""

    def __init__(self, jobs: Sequence[SchedulingJob]) -> None:
        self._jobs = sorted(jobs, key=lambda job: (job.submit_time, job.sequence))
        self._index = 0

    def __iter__(self) -> Iterator[SchedulingJob]:
        while self._index < len(self._jobs):
            yield self._jobs[self._index]

    def placed(self, job: SchedulingJob) -> None:
        self._index += 1

    def skipped(self, job: SchedulingJob) -> None:
        self._index += 1

    def blocked(self, job: SchedulingJob) -> list[SchedulingJob]:
        rest = self._jobs[self._index + 1 :]
        self._index = len(self._jobs)
        return rest


def sort_queues(
    jobs: Sequence[SchedulingJob], queues: Sequence[QueueInfo], key: Callable[[SchedulingJob], Any]
) -> dict[str, list[SchedulingJob]]:
    by_queue: dict[str, list[SchedulingJob]] = {queue.name: [] for queue in queues}
    for job in jobs:
        by_queue.setdefault(job.queue, []).append(job)
    for members in by_queue.values():
        members.sort(key=key)
    return by_queue
