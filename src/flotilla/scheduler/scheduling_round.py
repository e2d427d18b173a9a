"""The mutable state of one scheduling round, and the preemption context it offers plugins.

A round works on copies of the snapshot's node tables. Committing a job allocates its
placements; evicting a job releases them and tells the running-set plugins (quota) so their
state stays exact. With backfill there is a second, "long" view of the nodes in which the
reservations of blocked jobs are held as if running: jobs that would still run when a
reservation starts are placed there, so they can never delay it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import (
    Assignment,
    AssignmentStrategy,
    CycleStartInput,
    CycleState,
    Decision,
    PreFilterInput,
    RunningChange,
    SelectionInput,
    Status,
    WaitingInput,
    cluster_admits,
)
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.registry import Framework
from flotilla.framework.resources import EPSILON, Vector
from flotilla.framework.snapshot import (
    Eviction,
    QueueInfo,
    RunningJob,
    ScheduledJob,
    SchedulingSnapshot,
)
from flotilla.model.queue import Preemption
from flotilla.scheduler.caches import EngineCaches
from flotilla.scheduler.placement import place_job


class Outcome:
    """Why a decision failed, so the loop knows what may be cached or retried."""

    ADMISSION = "admission"
    PLACEMENT = "placement"


class SchedulingRound:
    """One round over one snapshot. Implements ``PreemptionContext`` for PostFilter plugins."""

    def __init__(
        self,
        framework: Framework,
        strategy: AssignmentStrategy,
        snapshot: SchedulingSnapshot,
        caches: EngineCaches | None = None,
    ) -> None:
        self.framework = framework
        self.caches = caches
        """The engine's caches (``scheduler.caches``); ``None`` places without them."""
        self.strategy = strategy
        self.now = snapshot.time
        self.clusters = [cluster.snapshot() for cluster in snapshot.clusters]
        self.long_view: list[Cluster] | None = None
        self.cycle = CycleState(time=snapshot.time)
        self.queues: dict[str, QueueInfo] = {queue.name: queue for queue in snapshot.queues}
        backlog = snapshot.backlog
        running_by_name = backlog.running_by_name if backlog is not None else None
        self.running: dict[str, RunningJob] = (
            dict(running_by_name)
            if running_by_name is not None
            else {r.job.name: r for r in snapshot.running}
        )
        self.scheduled: list[ScheduledJob] = []
        self.evictions: list[Eviction] = []
        self.unscheduled: dict[str, str] = {}
        """Jobs placed by this round and then evicted in it: they never start; why they wait."""
        self._running_before = frozenset(self.running)
        size = len(self.clusters[0].nodes.space) if self.clusters else 0
        self.total: Vector = sum(
            (c.total_capacity() for c in self.clusters if c.ready), start=np.zeros(size)
        )
        self.allocated: dict[str, Vector] = {name: np.zeros(size) for name in self.queues}
        allocated = backlog.allocated if backlog is not None else None
        if allocated is not None:
            for queue, amount in allocated.items():
                self.allocated[queue] = np.array(amount, dtype=np.float64)
        else:
            for running in snapshot.running:
                self._charge(running.job.queue, running.held(size))
        for plugin in framework.cycle_starts:
            plugin.start_cycle(CycleStartInput(snapshot=snapshot, cycle=self.cycle))

    # --- views --------------------------------------------------------------------------

    def ready(self, *, long: bool = False) -> list[Cluster]:
        view = self.long_view if long and self.long_view is not None else self.clusters
        return [cluster for cluster in view if cluster.ready]

    def _views(self) -> list[list[Cluster]]:
        return [self.clusters] + ([self.long_view] if self.long_view is not None else [])

    def open_long_view(self) -> list[Cluster]:
        if self.long_view is None:
            self.long_view = [cluster.snapshot() for cluster in self.clusters]
        return self.long_view

    def _apply(self, assignment: Assignment, sign: int) -> None:
        for view in self._views():
            cluster = next(c for c in view if c.name == assignment.cluster)
            for placement in assignment.placements:
                if sign > 0:
                    cluster.nodes.allocate(placement.row, placement.request, placement.gpus)
                else:
                    cluster.nodes.release(placement.row, placement.request, placement.gpus)

    # --- deciding -----------------------------------------------------------------------

    def admit(self, job: SchedulingJob, *, leftover: bool) -> Status:
        """PreFilter: the first refusal (its reason, e.g. ``refused by NAME``), or success."""
        for plugin in self.framework.pre_filters:
            status = plugin.pre_filter(
                PreFilterInput(job=job, cycle=self.cycle, leftover_pass=leftover)
            )
            if not status.ok:
                return (
                    status if status.reason else replace(status, reason=f"refused by {plugin.name}")
                )
        return Status.success()

    def candidates(
        self, job: SchedulingJob, *, long: bool, pinned: str | None = None
    ) -> list[Cluster]:
        return [
            cluster
            for cluster in self.ready(long=long)
            if (pinned is None or cluster.name == pinned) and cluster_admits(cluster, job)
        ]

    def select(
        self,
        job: SchedulingJob,
        clusters: Sequence[Cluster],
        *,
        minimum: int | None = None,
    ) -> Decision:
        """The strategy's choice among ``clusters``; nothing is allocated."""
        return self.strategy.select(
            SelectionInput(
                job=job,
                clusters=clusters,
                place=lambda cluster: place_job(
                    self.framework,
                    job,
                    cluster,
                    self.cycle,
                    keep=False,
                    minimum=minimum,
                    caches=self.caches,
                ),
            )
        )

    def permit_and_place(
        self,
        job: SchedulingJob,
        decision: Decision,
        clusters: Sequence[Cluster],
        minimum: int | None,
    ) -> Decision:
        """Run Permit, then place for real on the chosen cluster of the given view."""
        assert decision.assignment is not None
        from flotilla.framework.interfaces import PermitInput

        for permitter in self.framework.permits:
            status = permitter.permit(
                PermitInput(job=job, assignment=decision.assignment, cycle=self.cycle)
            )
            if not status.ok:
                return Decision(None, status.reason or f"not permitted by {permitter.name}")
        # The strategy's tentative placement was rolled back exactly, so applying it as it is
        # commits the same result without placing the job a second time.
        self._apply(decision.assignment, +1)
        return decision

    def job_waits(self, job: SchedulingJob, reason: str) -> None:
        """Tell the Waiting plugins that ``job`` stays queued in this round."""
        for plugin in self.framework.waiting:
            plugin.job_waits(WaitingInput(job=job, reason=reason, cycle=self.cycle))

    # --- the running set ------------------------------------------------------------------

    def commit(
        self, job: SchedulingJob, assignment: Assignment, *, note: str | None = None
    ) -> Vector:
        """``job`` starts (or grows) with ``assignment``, already allocated in every view;
        returns what ``assignment`` holds (charged to the job's queue)."""
        size = len(self.total)
        previous = self.running.get(job.name)
        if previous is not None:
            merged = Assignment(
                cluster=assignment.cluster,
                placements=previous.assignment.placements + assignment.placements,
                annotations={**previous.assignment.annotations, **assignment.annotations},
            )
            self._running_change(previous, added=False)
            self.running[job.name] = RunningJob(
                job, merged, previous.started_at, previous.last_checkpoint_at
            )
        else:
            self.running[job.name] = RunningJob(job, assignment, self.now)
        amount = assignment.held(size)
        self._running_change(
            self.running[job.name], added=True, held=amount if previous is None else None
        )
        self._charge(job.queue, amount)
        self.scheduled.append(ScheduledJob(job, assignment, note))
        return amount

    def evict(self, victims: Sequence[str], by: str, reason: str) -> list[tuple[str, Vector]]:
        """Preempt ``victims`` for real; returns each victim's queue and what it held.

        A victim this round placed (or grew) loses that decision too: a job placed earlier in
        the round never starts, and only jobs that were running before it are preempted.
        """
        released = []
        for name in victims:
            running = self.running.pop(name)
            self._apply(running.assignment, -1)
            amount = running.assignment.held(len(self.total))
            self._running_change(running, added=False, held=amount)
            self._charge(running.job.queue, -amount)
            self.scheduled = [decision for decision in self.scheduled if decision.job.name != name]
            if name in self._running_before:
                self.evictions.append(Eviction(job=name, by=by, reason=reason))
            else:
                self.unscheduled[name] = f"placed, then displaced before it started: {reason}"
            released.append((running.job.queue, amount))
        return released

    def _running_change(
        self, running: RunningJob, *, added: bool, held: Vector | None = None
    ) -> None:
        """Tell the running-set plugins; ``held`` is ``running.assignment.held`` when the
        caller has it already."""
        change = RunningChange(
            job=running.job,
            assignment=running.assignment,
            cycle=self.cycle,
            held=running.assignment.held(len(self.total)) if held is None else held,
        )
        for plugin in self.framework.running_sets:
            if added:
                plugin.add_running(change)
            else:
                plugin.remove_running(change)

    def _charge(self, queue: str, amount: Vector) -> None:
        """In place: every allocation vector is the round's own (made or copied in ``__init__``,
        or made here), and the DRF order keeps its own copy."""
        allocated = self.allocated.get(queue)
        if allocated is None:
            self.allocated[queue] = allocated = np.zeros_like(amount)
        allocated += amount

    # --- PreemptionContext ------------------------------------------------------------------

    @property
    def running_jobs(self) -> list[RunningJob]:
        return list(self.running.values())

    def fits_without(self, job: SchedulingJob, victims: Sequence[str]) -> bool:
        removed = [self.running.pop(name) for name in victims if name in self.running]
        for running in removed:
            self._apply(running.assignment, -1)
            self._running_change(running, added=False)
        try:
            admitted = self.admit(job, leftover=True).ok
            if not admitted:
                return False
            return self.select(job, self.candidates(job, long=False)).found
        finally:
            for running in reversed(removed):
                self._apply(running.assignment, +1)
                self._running_change(running, added=True)
                self.running[running.job.name] = running

    def queue_share(self, queue: str, change: Vector | None = None) -> float:
        used = self.allocated.get(queue, np.zeros_like(self.total))
        if change is not None:
            used = used + change
        inverse = np.divide(
            1.0, self.total, out=np.zeros_like(self.total), where=self.total > EPSILON
        )
        weight = self.queues[queue].weight if queue in self.queues else 1.0
        return float((used * inverse).max(initial=0.0)) / weight

    def queue_policy(self, queue: str) -> Preemption:
        info = self.queues.get(queue)
        return info.preemption if info is not None else Preemption()

    # Quota questions are answered from what the quota plugin published (``cycle.quota``).

    def quota_node(self, queue: str) -> int | None:
        quota = self.cycle.quota
        return quota.node(queue) if quota is not None else None

    def same_cohort(self, queue: str, other: str) -> bool:
        quota = self.cycle.quota
        return quota is not None and quota.same_cohort(queue, other)

    def borrowed(self, queue: str) -> Vector | None:
        """What the queue's quota node uses above its guarantee (``None`` without a quota)."""
        quota = self.cycle.quota
        return quota.borrowed(queue) if quota is not None else None

    def within_guarantee(self, job: SchedulingJob, freed: Vector | None = None) -> bool:
        quota = self.cycle.quota
        if quota is None:
            return False
        amount = job.total if freed is None else job.total - freed
        return quota.within_guarantee(job.queue, amount)

    def gang_of(self, job_name: str) -> list[str]:
        running = self.running.get(job_name)
        if running is None or running.job.gang is None or not running.job.gang.name:
            return [job_name]
        gang = running.job.gang.name
        return sorted(
            name
            for name, other in self.running.items()
            if other.job.gang is not None and other.job.gang.name == gang
        )
