"""Elastic quota (Koordinator's ElasticQuota, Kueue's cohorts) as PreFilter + Reserve.

PreFilter admits a job when its queue's quota node and every ancestor can hold it (hard
limits: max, the parent's pool less what siblings keep) and, outside the leftover pass, when it
stays within the runtime quota (guarantee first, spare split by weight). Usage is charged when
a job enters the run's running set and refunded when preemption takes it out (the running-set
hooks), so what-if evictions keep it exact.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from flotilla.framework.interfaces import (
    CycleStartInput,
    CycleState,
    PreFilterInput,
    RunningChange,
    Status,
)
from flotilla.framework.quota import IndexArray, Matrix, QuotaUsage
from flotilla.framework.resources import Vector
from flotilla.framework.snapshot import SchedulingSnapshot


@dataclass
class QuotaState:
    usage: QuotaUsage
    node_of_queue: dict[str, int]


def quota_state(cycle: CycleState) -> QuotaState | None:
    """The run's quota usage, or ``None`` when the fleet has no quota tree."""
    state = cycle.data.get(ElasticQuota.name)
    return state if isinstance(state, QuotaState) else None


def start_usage(snapshot: SchedulingSnapshot) -> QuotaState | None:
    """Usage from running jobs and runtime quota from usage plus queued demand.

    Summed afresh every run, with exactly the additions (and order) of charging one job after
    another, so a run's usage does not depend on what earlier runs did; the per-job work is
    one dictionary lookup, the arithmetic is a handful of whole-array operations."""
    tree = snapshot.quotas
    if tree is None or len(tree) == 0:
        return None
    node_of_queue = {
        queue.name: tree.index[queue.quota] for queue in snapshot.queues if queue.quota
    }
    size = len(tree.space)
    usage = tree.usage()
    nodes, amounts = _charges(
        node_of_queue, ((r.job.queue, r.held(size)) for r in snapshot.running), size
    )
    usage.add_many(nodes, amounts)
    demand = usage.used.copy()
    nodes, amounts = _charges(
        node_of_queue, ((job.queue, job.total) for job in snapshot.queued), size
    )
    tree.add_along_paths(demand, nodes, amounts)
    usage.compute_runtime(demand)
    return QuotaState(usage, node_of_queue)


def _charges(
    node_of_queue: dict[str, int], items: Iterable[tuple[str, Vector]], size: int
) -> tuple[IndexArray, Matrix]:
    """The quota node and the amount of every item whose queue has a quota, in order."""
    nodes: list[int] = []
    amounts: list[Vector] = []
    for queue, amount in items:
        node = node_of_queue.get(queue)
        if node is not None:
            nodes.append(node)
            amounts.append(amount)
    if not nodes:
        return np.zeros(0, dtype=np.intp), np.zeros((0, size))
    return np.array(nodes, dtype=np.intp), np.concatenate(amounts).reshape(len(nodes), size)


class ElasticQuota:
    name = "elastic-quota"

    def start_cycle(self, request: CycleStartInput) -> None:
        state = start_usage(request.snapshot)
        if state is not None:
            request.cycle.data[self.name] = state

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

    def remove_running(self, request: RunningChange) -> None:
        state = quota_state(request.cycle)
        node = state.node_of_queue.get(request.job.queue) if state else None
        if state is not None and node is not None:
            state.usage.remove(node, request.assignment.held(len(request.job.total)))

    def add_running(self, request: RunningChange) -> None:
        state = quota_state(request.cycle)
        node = state.node_of_queue.get(request.job.queue) if state else None
        if state is not None and node is not None:
            state.usage.add(node, request.assignment.held(len(request.job.total)))
