"""Elastic quota (Koordinator's ElasticQuota, Kueue's cohorts) as PreFilter + Reserve.

PreFilter admits a job when its queue's quota node and every ancestor can hold it (hard
limits: max, the parent's pool less what siblings keep) and, outside the leftover pass, when it
stays within the runtime quota (guarantee first, spare split by weight). Usage is charged when
a job enters the round's running set and refunded when preemption takes it out (the running-set
hooks), so what-if evictions keep it exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flotilla.framework.interfaces import (
    CycleStartInput,
    CycleState,
    PreFilterInput,
    RunningChange,
    Status,
    WaitingInput,
)
from flotilla.framework.quota_route import IndexArray, Matrix
from flotilla.framework.quota_view import QuotaView
from flotilla.framework.resources import Vector
from flotilla.framework.snapshot import SchedulingSnapshot
from flotilla.model.queue import ReclaimWithinCohort


@dataclass
class QuotaState(QuotaView):
    """The round's quota usage; published whole as ``CycleState.quota`` (a ``QuotaView``)."""

    reserving: frozenset[str] = frozenset()
    """Queues whose pending jobs reserve their unused guarantee (``reclaim_within_cohort``
    ``never`` or ``lower_priority``: they could not get it back from a borrower later)."""


def quota_state(cycle: CycleState) -> QuotaState | None:
    """The round's quota usage, or ``None`` when the fleet has no quota tree."""
    state = cycle.quota
    return state if isinstance(state, QuotaState) else None


def start_usage(snapshot: SchedulingSnapshot) -> QuotaState | None:
    """Usage from running jobs and runtime quota from usage plus queued demand.

    Summed afresh every round, with exactly the additions (and order) of charging one job after
    another, so a round's usage does not depend on what earlier rounds did; the per-job work is
    one dictionary lookup, the arithmetic is a handful of whole-array operations."""
    tree = snapshot.quotas
    if tree is None or len(tree) == 0:
        return None
    node_of_queue = {
        queue.name: tree.index[queue.quota] for queue in snapshot.queues if queue.quota
    }
    size = len(tree.space)
    usage = tree.usage()
    running = snapshot.running
    queues = [r.job.queue for r in running]
    held = [
        r.job.total
        if len(r.assignment.placements) == r.job.replica_count
        else r.assignment.held(size)
        for r in running
    ]  # RunningJob.held, inlined: this runs once per running job per round
    usage.add_many(*_charges(node_of_queue, queues, held, size))
    demand = usage.used.copy()
    queued = snapshot.queued
    charges = _charges(
        node_of_queue, [job.queue for job in queued], [j.total for j in queued], size
    )
    tree.add_along_paths(demand, *charges)
    usage.compute_runtime(demand)
    reserving = frozenset(
        queue.name
        for queue in snapshot.queues
        if queue.quota and queue.preemption.reclaim_within_cohort is not ReclaimWithinCohort.ANY
    )
    return QuotaState(usage, node_of_queue, reserving)


def _charges(
    node_of_queue: dict[str, int], queues: list[str], amounts: list[Vector], size: int
) -> tuple[IndexArray, Matrix]:
    """The quota node and the amount of every item whose queue has a quota, in order."""
    nodes = np.array([node_of_queue.get(queue, -1) for queue in queues], dtype=np.intp)
    if not len(nodes):
        return nodes, np.zeros((0, size))
    matrix = np.concatenate(amounts).reshape(len(nodes), size)
    charged = nodes >= 0
    if charged.all():
        return nodes, matrix
    return nodes[charged], matrix[charged]


class ElasticQuota:
    name = "elastic-quota"

    def start_cycle(self, request: CycleStartInput) -> None:
        state = start_usage(request.snapshot)
        if state is not None:
            request.cycle.quota = state

    def pre_filter(self, request: PreFilterInput) -> Status:
        state = quota_state(request.cycle)
        if state is None:
            return Status.success()
        node = state.node_of_queue.get(request.job.queue)
        if node is None:
            return Status.success()
        verdict = state.usage.admit(node, request.job.total, use_runtime=not request.leftover_pass)
        if verdict.ok:
            return Status.success()
        return Status(ok=False, reason=verdict.reason, deferrable=verdict.soft)

    def job_waits(self, request: WaitingInput) -> None:
        """Kueue's rule for a lender that cannot reclaim: the waiting job's queue keeps its
        unused guarantee, up to what the job asks, from borrowers for the rest of the round.
        With ``reclaim_within_cohort: any`` nothing is kept: the queue can take it back by
        preemption when its job is ready to run."""
        state = quota_state(request.cycle)
        if state is None or request.job.queue not in state.reserving:
            return
        node = state.node_of_queue.get(request.job.queue)
        if node is not None:
            state.usage.reserve(node, request.job.total)

    def remove_running(self, request: RunningChange) -> None:
        state = quota_state(request.cycle)
        node = state.node_of_queue.get(request.job.queue) if state else None
        if state is not None and node is not None:
            state.usage.remove(node, request.held)

    def add_running(self, request: RunningChange) -> None:
        state = quota_state(request.cycle)
        node = state.node_of_queue.get(request.job.queue) if state else None
        if state is not None and node is not None:
            state.usage.add(node, request.held)
