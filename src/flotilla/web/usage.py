"""What the fleet is using right now: per node, per cluster, per queue and per quota.

The API lists clusters, nodes, queues and quotas as configured; the dashboard also needs what
is allocated on each of them. That is derived here from the active jobs (leased, pending,
running) and their runs' placements: each placement holds one replica of a task, so it holds
that task's resources on its node. Nothing is stored; a snapshot is computed on request and
by the timeline sampler.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from flotilla.framework.assignment_record import AssignmentRecord
from flotilla.model import QuotaSpec
from flotilla.store import ACTIVE_JOB_STATES, WAITING_JOB_STATES, JobRecord, Store

Amounts = dict[str, float]

_PAGE = 1000

_PACED_PAGE = 200
"""Jobs per read when the walk paces itself: one read of 1,000 jobs is 100 ms or more of
Python (the rows, then their records) that nothing can interrupt."""


def _add(into: Amounts, amounts: Mapping[str, float]) -> None:
    for name, amount in amounts.items():
        into[name] = into.get(name, 0.0) + float(amount)


def _capacity_of(resources: Mapping[str, float], spec: Mapping[str, Any]) -> Amounts:
    capacity = {name: float(amount) for name, amount in resources.items()}
    gpus = spec.get("gpus") or {}
    if gpus.get("count") and "gpu" not in capacity:
        capacity["gpu"] = float(gpus["count"])
    return capacity


@dataclass
class NodeUsage:
    cluster: str
    name: str
    state: str
    heartbeat_at: datetime | None
    labels: Mapping[str, str]
    capacity: Amounts
    allocated: Amounts = field(default_factory=dict)
    gpu_devices: int = 0
    gpus_in_use: dict[int, list[str]] = field(default_factory=dict)
    """Device index -> the jobs (names) holding it or a share of it."""
    jobs: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "heartbeat_at": self.heartbeat_at,
            "labels": dict(self.labels),
            "capacity": self.capacity,
            "allocated": self.allocated,
            "gpu_devices": self.gpu_devices,
            "gpus_in_use": {str(index): jobs for index, jobs in sorted(self.gpus_in_use.items())},
            "jobs": self.jobs,
        }


@dataclass
class QueueUsage:
    name: str
    weight: float
    quota: str | None
    allocated: Amounts = field(default_factory=dict)
    running: int = 0
    queued: int = 0
    dominant_share: float = 0.0
    fair_share: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "weight": self.weight,
            "quota": self.quota,
            "allocated": self.allocated,
            "running": self.running,
            "queued": self.queued,
            "dominant_share": round(self.dominant_share, 4),
            "fair_share": round(self.fair_share, 4),
        }


@dataclass
class FleetUsage:
    clusters: list[dict[str, Any]]
    nodes: list[NodeUsage]
    queues: list[QueueUsage]
    quotas: list[dict[str, Any]]
    capacity: Amounts
    """Total of the ready clusters: the denominator of every share."""

    def as_dict(self) -> dict[str, Any]:
        clusters = []
        for cluster in self.clusters:
            nodes = [node.as_dict() for node in self.nodes if node.cluster == cluster["name"]]
            clusters.append({**cluster, "nodes": nodes})
        return {
            "clusters": clusters,
            "queues": [queue.as_dict() for queue in self.queues],
            "quotas": self.quotas,
            "capacity": self.capacity,
        }


def active_jobs(store: Store, page_size: int = _PAGE) -> Iterable[JobRecord]:
    after: int | None = None
    while True:
        page = store.list_jobs(states=sorted(ACTIVE_JOB_STATES), after=after, limit=page_size)
        yield from page.jobs
        if page.next_cursor is None:
            return
        after = page.next_cursor


HIDDEN = "(hidden)"
"""A job's name where the caller may not read the job."""


def _task_resources(job: JobRecord) -> dict[str, Mapping[str, float]]:
    return {task.name: task.resources for task in job.spec.tasks}


def fleet_usage(
    store: Store,
    pace: Callable[[], None] | None = None,
    may_read: Callable[[str, str | None], bool] | None = None,
) -> FleetUsage:
    """A consistent-enough snapshot: each list is read once, in one pass over active jobs.
    ``pace`` is called between jobs, which are then read in smaller pages (the sampler's
    ``Precedence.pace``: thousands of running jobs are a long walk, and a GET need not wait
    for it). ``may_read(queue, owner)``: whether the caller may see a job; the nodes name
    the others ``(hidden)``, as the API would not show them (issue 23)."""
    clusters = store.list_clusters()
    nodes: dict[tuple[str, str], NodeUsage] = {}
    capacity: Amounts = {}
    cluster_rows: list[dict[str, Any]] = []
    cluster_allocated: dict[str, Amounts] = {}
    for cluster in clusters:
        cluster_capacity: Amounts = {}
        for record in store.list_nodes(cluster.name):
            node_capacity = _capacity_of(record.resources, record.spec)
            gpus = (record.spec.get("gpus") or {}).get("count") or 0
            nodes[(cluster.name, record.name)] = NodeUsage(
                cluster=cluster.name,
                name=record.name,
                state=record.state,
                heartbeat_at=record.heartbeat_at,
                labels=record.labels,
                capacity=node_capacity,
                gpu_devices=int(gpus),
            )
            _add(cluster_capacity, node_capacity)
        if cluster.state == "ready":
            _add(capacity, cluster_capacity)
        cluster_allocated[cluster.name] = {}
        cluster_rows.append(
            {
                "name": cluster.name,
                "backend": cluster.backend,
                "state": cluster.state,
                "reason": cluster.reason if cluster.state == "unreachable" else None,
                "heartbeat_at": cluster.heartbeat_at,
                "labels": dict(cluster.labels),
                "capacity": cluster_capacity,
                "allocated": cluster_allocated[cluster.name],
            }
        )
    queues = {
        spec.name: QueueUsage(name=spec.name, weight=spec.weight, quota=spec.quota)
        for spec in store.list_queues()
    }
    for job in active_jobs(store, _PAGE if pace is None else _PACED_PAGE):
        if pace is not None:
            pace()
        queue = queues.get(job.queue)
        if queue is not None:
            queue.running += 1
        if job.run is None:
            continue
        resources = _task_resources(job)
        label = job.name if may_read is None or may_read(job.queue, job.owner) else HIDDEN
        for placement in AssignmentRecord.unmarshal(job.run.assignment).placements:
            amounts = resources.get(placement.task, {})
            node = nodes.get((job.run.cluster, placement.node))
            if node is not None:
                _add(node.allocated, amounts)
                if label not in node.jobs:
                    node.jobs.append(label)
                for device in placement.gpus:  # held whole or in part: named once
                    node.gpus_in_use.setdefault(device, []).append(label)
            _add(cluster_allocated.setdefault(job.run.cluster, {}), amounts)
            if queue is not None:
                _add(queue.allocated, amounts)
    for name, states in store.job_counts().items():
        queue = queues.get(name)
        if queue is not None:
            queue.queued = sum(states.get(state.value, 0) for state in WAITING_JOB_STATES)
    _shares(list(queues.values()), capacity)
    quotas = _quota_usage(store.list_quotas(), list(queues.values()))
    return FleetUsage(cluster_rows, list(nodes.values()), list(queues.values()), quotas, capacity)


def _shares(queues: list[QueueUsage], capacity: Amounts) -> None:
    """Dominant share against the fleet, and the fair share weighted DRF would give: the
    queue's weight over the weights of the queues that want something (running or queued)."""
    for queue in queues:
        shares = [
            amount / capacity[name]
            for name, amount in queue.allocated.items()
            if capacity.get(name, 0.0) > 0
        ]
        queue.dominant_share = max(shares, default=0.0)
    demanding = [queue for queue in queues if queue.running or queue.queued]
    total = sum(queue.weight for queue in demanding)
    for queue in queues:
        wants = queue in demanding
        queue.fair_share = queue.weight / total if wants and total > 0 else 0.0


def _quota_usage(roots: list[QuotaSpec], queues: list[QueueUsage]) -> list[dict[str, Any]]:
    """Each quota with its min/max/lending limit and the usage of the queues under it (its
    subtree's queues): above min it borrows, below min it lends what it does not use."""
    by_quota: dict[str, list[QueueUsage]] = {}
    for queue in queues:
        if queue.quota is not None:
            by_quota.setdefault(queue.quota, []).append(queue)
    rows: list[dict[str, Any]] = []

    def visit(spec: QuotaSpec, parent: str | None, depth: int) -> Amounts:
        usage: Amounts = {}
        for queue in by_quota.get(spec.name, []):
            _add(usage, queue.allocated)
        row: dict[str, Any] = {
            "name": spec.name,
            "parent": parent,
            "depth": depth,
            "min": {k: float(v) for k, v in spec.min.items()},
            "max": None if spec.max is None else {k: float(v) for k, v in spec.max.items()},
            "lending_limit": None
            if spec.lending_limit is None
            else {k: float(v) for k, v in spec.lending_limit.items()},
            "weight": spec.weight,
            "queues": [queue.name for queue in by_quota.get(spec.name, [])],
        }
        rows.append(row)
        for child in spec.children:
            _add(usage, visit(child, spec.name, depth + 1))
        row["usage"] = usage
        # Only resources the quota bounds (named in min or max) can borrow: the others are
        # not governed by it.
        bounded = set(row["min"]) | set(row["max"] or {})
        row["borrowing"] = {
            name: round(amount - row["min"].get(name, 0.0), 6)
            for name, amount in usage.items()
            if name in bounded and amount > row["min"].get(name, 0.0) + 1e-9
        }
        row["lending"] = {
            name: round(minimum - usage.get(name, 0.0), 6)
            for name, minimum in row["min"].items()
            if usage.get(name, 0.0) < minimum - 1e-9
        }
        return usage

    for root in roots:
        visit(root, None, 0)
    return rows
