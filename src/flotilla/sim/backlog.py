"""The simulator's queued jobs, kept in the shapes a scheduling round reads them in.

Each cycle's snapshot needs every queued job in enqueue order and, per queue, the jobs in
priority-sort order. Rebuilding and re-sorting them every cycle cost the Philly replay a
pass over the whole backlog per cycle; kept here incrementally, a snapshot copies only the
queues that changed since the last one (C-level copies of their dictionaries' values).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from flotilla.framework.jobs import SchedulingJob


def priority_order(job: SchedulingJob) -> tuple[int, float, int]:
    """The priority-sort plugin's order: higher priority first, then earlier submission."""
    return (-job.priority, job.submit_time, job.sequence)


class Backlog:
    """Queued jobs in enqueue order, and per queue in priority-sort order.

    A job enqueued behind every job its queue ever held (the usual case: submissions arrive
    in time order) is appended; one that belongs earlier (a preempted job keeps its
    submission time) re-sorts its queue once. Snapshots share immutable tuples, rebuilt only
    for the queues that changed since they were last taken.
    """

    def __init__(self, queues: Iterable[str]) -> None:
        self._all: dict[str, SchedulingJob] = {}
        self._by_queue: dict[str, dict[str, SchedulingJob]] = {name: {} for name in queues}
        self._last: dict[str, tuple[int, float, int]] = {}
        self._views: dict[str, tuple[SchedulingJob, ...]] = {}
        self._all_view: tuple[SchedulingJob, ...] | None = None

    def add(self, job: SchedulingJob) -> None:
        if job.name in self._all:
            return
        self._all[job.name] = job
        self._all_view = None
        queue = job.queue
        members = self._by_queue.setdefault(queue, {})
        members[job.name] = job
        self._views.pop(queue, None)
        key = priority_order(job)
        last = self._last.get(queue)
        if last is None or key >= last:
            self._last[queue] = key
            return
        ordered = sorted(members.values(), key=priority_order)
        members.clear()
        members.update((member.name, member) for member in ordered)

    def remove(self, job: SchedulingJob) -> None:
        if self._all.pop(job.name, None) is None:
            return
        self._all_view = None
        del self._by_queue[job.queue][job.name]
        self._views.pop(job.queue, None)

    def __len__(self) -> int:
        return len(self._all)

    def queued(self) -> tuple[SchedulingJob, ...]:
        """Every queued job, in the order they were enqueued."""
        view = self._all_view
        if view is None:
            view = self._all_view = tuple(self._all.values())
        return view

    def by_queue(self) -> Mapping[str, tuple[SchedulingJob, ...]]:
        """Per queue, its jobs in priority-sort order (``BacklogView.by_queue``)."""
        views = self._views
        for name, members in self._by_queue.items():
            if name not in views:
                views[name] = tuple(members.values())
        return {name: views[name] for name in self._by_queue}
