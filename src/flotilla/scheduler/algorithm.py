"""One scheduling run over a snapshot: order jobs fairly, pick a cluster, place, explain.

The same ``SchedulingAlgorithm`` serves the simulator, the service and the tests. It reads a
``SchedulingSnapshot`` and returns a ``CycleResult``; applying the result is the caller's job.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import (
    AssignmentStrategy,
    CycleState,
    Decision,
    PermitInput,
    PreFilterInput,
    SelectionInput,
)
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.placement import place_job
from flotilla.framework.registry import Framework, load_strategy
from flotilla.framework.resources import Vector
from flotilla.model.scenario import FairShare, Queueing
from flotilla.scheduler.ordering import DrfOrder, FifoOrder, sort_queues
from flotilla.scheduler.types import (
    CycleResult,
    CycleStats,
    ScheduledJob,
    SchedulingConfig,
    SchedulingSnapshot,
)


class SchedulingAlgorithm:
    """Fair ordering + assignment strategy + plugin framework, composed once per config."""

    def __init__(
        self,
        config: SchedulingConfig,
        framework: Framework | None = None,
        strategy: AssignmentStrategy | None = None,
    ) -> None:
        self.config = config
        self.framework = framework or Framework.from_profile(
            config.profile, config.enabled_plugins, config.disabled_plugins
        )
        self.strategy = strategy or load_strategy(config.assignment_strategy)
        self._sort_key = self.framework.queue_sort.sort_key

    def schedule(self, snapshot: SchedulingSnapshot) -> CycleResult:
        started = time.perf_counter()
        clusters = [cluster.snapshot() for cluster in snapshot.clusters]
        ready = [cluster for cluster in clusters if cluster.ready]
        cycle = CycleState(time=snapshot.time)
        space_size = len(clusters[0].nodes.space) if clusters else 0
        total = sum((c.total_capacity() for c in ready), start=_zeros(space_size))
        allocated = {queue.name: _zeros(space_size) for queue in snapshot.queues}
        for running in snapshot.running:
            allocated.setdefault(running.job.queue, _zeros(space_size))
            allocated[running.job.queue] = allocated[running.job.queue] + running.job.total

        order: DrfOrder | FifoOrder
        if self.config.fair_share is FairShare.FIFO:
            order = FifoOrder(snapshot.queued)
        else:
            jobs_by_queue = sort_queues(snapshot.queued, snapshot.queues, self._sort_key)
            order = DrfOrder(snapshot.queues, jobs_by_queue, allocated, total)

        strict = self.config.queueing is Queueing.STRICT_FIFO
        scheduled: list[ScheduledJob] = []
        pending: dict[str, str] = {}
        # Placement failures by placement key: within a run free resources only shrink, so a
        # shape that did not fit will not fit later in the same run.
        failed_shapes: dict[tuple[object, ...], str] = {}
        considered = cache_hits = 0

        for job in order:
            considered += 1
            reason = failed_shapes.get(job.placement_key)
            if reason is not None:
                cache_hits += 1
            else:
                decision = self._decide(job, ready, cycle)
                if decision.assignment is not None:
                    scheduled.append(ScheduledJob(job, decision.assignment))
                    order.placed(job)
                    continue
                reason = decision.reason
                if decision.reason.startswith(_PLACEMENT):
                    failed_shapes[job.placement_key] = reason
            pending[job.name] = reason.removeprefix(_PLACEMENT)
            if strict:
                for behind in order.blocked(job):
                    pending[behind.name] = (
                        f"waiting behind {job.name}, which heads its queue (strict-fifo)"
                        if self.config.fair_share is FairShare.DRF
                        else f"waiting behind {job.name}, the oldest job (strict-fifo)"
                    )
            else:
                order.skipped(job)

        stats = CycleStats(
            considered=considered,
            scheduled=len(scheduled),
            cache_hits=cache_hits,
            seconds=time.perf_counter() - started,
        )
        return CycleResult(
            time=snapshot.time, scheduled=tuple(scheduled), pending=pending, stats=stats
        )

    def _decide(self, job: SchedulingJob, ready: Sequence[Cluster], cycle: CycleState) -> Decision:
        for plugin in self.framework.pre_filters:
            status = plugin.pre_filter(PreFilterInput(job=job, cycle=cycle))
            if not status.ok:
                return Decision(None, status.reason or f"refused by {plugin.name}")
        required = job.affinity.clusters.required
        candidates = [
            cluster
            for cluster in ready
            if all(cluster.labels.get(key) == value for key, value in required.items())
        ]
        decision = self.strategy.select(
            SelectionInput(
                job=job,
                clusters=candidates,
                place=lambda cluster: place_job(self.framework, job, cluster, cycle, keep=False),
            )
        )
        if decision.assignment is None:
            return Decision(None, _PLACEMENT + decision.reason)
        chosen = next(c for c in candidates if c.name == decision.assignment.cluster)
        for permitter in self.framework.permits:
            status = permitter.permit(
                PermitInput(job=job, assignment=decision.assignment, cycle=cycle)
            )
            if not status.ok:
                return Decision(None, status.reason or f"not permitted by {permitter.name}")
        committed = place_job(self.framework, job, chosen, cycle, keep=True)
        if committed.assignment is None:  # pragma: no cover - place_job is deterministic
            raise RuntimeError(f"placement of {job.name} on {chosen.name} changed on commit")
        return committed


_PLACEMENT = "\x00placement:"
"""Marks reasons that come from placement (cacheable per shape) rather than admission."""


def _zeros(size: int) -> Vector:
    return np.zeros(size)
