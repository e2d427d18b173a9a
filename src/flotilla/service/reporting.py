"""The cycle report and the scheduler's gauges (queue depth, running jobs, allocation, share).

Per-queue counts come from the JobDb's per-queue indexes (O(queues), not O(jobs)): a cycle
over a large backlog must not walk it just to publish gauges. Allocation and shares read the
catalog from the store, so they are refreshed at most every ``ALLOCATION_PUBLISH_SECONDS``.
"""

from __future__ import annotations

import time

from flotilla.framework.snapshot import CycleResult
from flotilla.jobdb import ReadTxn
from flotilla.service.capacity import CapacityGauges
from flotilla.service.context import LoopContext
from flotilla.service.handle import CycleReport
from flotilla.store import ACTIVE_JOB_STATES, JobState

ALLOCATION_PUBLISH_SECONDS = 2.0
"""Allocation and share gauges read the catalog from the store: refreshed at most this often,
so a busy loop spends its cycles on transitions (cancel latency), not on metrics."""


class Reporter:
    def __init__(self, context: LoopContext) -> None:
        self._context = context
        self._published_at = float("-inf")
        self._shares: dict[str, float] = {}
        self._queues_seen: set[str] = set()
        self._capacity = CapacityGauges(context.metrics)

    def report(
        self,
        *,
        number: int,
        seconds: float,
        result: CycleResult | None,
        runner_state: str | None,
    ) -> CycleReport:
        context = self._context
        read = context.jobdb.read_txn()
        queued = read.count_by_queue((JobState.QUEUED,))
        running = read.count_by_queue(tuple(ACTIVE_JOB_STATES))
        self._queues_seen |= set(queued) | set(running)
        for queue in self._queues_seen:
            context.metrics.queue_depth.labels(queue=queue).set(queued.get(queue, 0))
            context.metrics.running_jobs.labels(queue=queue).set(running.get(queue, 0))
        now = time.monotonic()
        if now - self._published_at >= ALLOCATION_PUBLISH_SECONDS:
            self._published_at = now
            self._shares = self._publish_allocation(read)
        return CycleReport(
            number=number,
            finished_at=time.time(),
            seconds=seconds,
            algorithm_seconds=result.stats.seconds if result is not None else None,
            leader=context.lease is not None,
            considered=result.stats.considered if result else 0,
            scheduled=result.stats.scheduled if result else 0,
            preempted=result.stats.preempted if result else 0,
            queued_by_queue=queued,
            running_by_queue=running,
            dominant_share=self._shares,
            runner_state=runner_state,
        )

    def _publish_allocation(self, read: ReadTxn) -> dict[str, float]:
        """Per queue: resources held (by requests of active runs) and weighted dominant share
        of the fleet, as gauges; returns the shares."""
        context = self._context
        capacity: dict[str, float] = {}
        for amounts in self._capacity.publish(context.store, read, context.pace).values():
            for name, amount in amounts.items():
                capacity[name] = capacity.get(name, 0.0) + amount
        held: dict[str, dict[str, float]] = {}
        for state in ACTIVE_JOB_STATES:
            for job in read.jobs_in_state(state):
                context.pace()
                mine = held.setdefault(job.queue, {})
                for task in job.spec.tasks:
                    for name, amount in task.resources.items():
                        mine[name] = mine.get(name, 0.0) + amount * task.replicas
        weights = {spec.name: spec.weight for spec in context.store.list_queues()}
        shares: dict[str, float] = {}
        for queue in set(weights) | set(held):
            amounts = held.get(queue, {})
            for name in capacity:
                context.metrics.allocated.labels(queue=queue, resource=name).set(
                    amounts.get(name, 0.0)
                )
            fractions = [amounts.get(n, 0.0) / c for n, c in capacity.items() if c > 0]
            shares[queue] = max(fractions, default=0.0) / weights.get(queue, 1.0)
            self._context.metrics.dominant_share.labels(queue=queue).set(shares[queue])
        return shares
