"""Helpers shared by the strategies: preferred affinity, fit probing, reasons."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import Decision, SelectionInput, no_cluster_reason
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.resources import CORE_RESOURCES, EPSILON
from flotilla.model.quantity import GIB


def preferred_matches(job: SchedulingJob, cluster: Cluster) -> int:
    """How many of the job's preferred cluster labels this cluster carries."""
    preferred = job.affinity.clusters.preferred
    if not preferred:
        return 0  # the common case, without building a generator per job and cluster
    return sum(1 for key, value in preferred.items() if cluster.labels.get(key) == value)


def best_fitting(
    request: SelectionInput, rank: Callable[[Cluster, Decision], tuple[float, ...]], label: str
) -> Decision:
    """Place on every candidate cluster; keep the lowest ``rank`` among those that fit now."""
    if not request.clusters:
        return Decision(None, no_cluster_reason(request.job))
    fitting: list[tuple[tuple[float, ...], Cluster, Decision]] = []
    failures: list[str] = []
    for cluster in request.clusters:
        decision = request.place(cluster)
        if decision.found:
            fitting.append((rank(cluster, decision), cluster, decision))
        else:
            failures.append(decision.reason)
    if not fitting:
        return Decision(None, "does not fit in any ready cluster now: " + " | ".join(failures))
    _, cluster, decision = min(fitting, key=lambda item: (*item[0], item[1].order))
    return Decision(decision.assignment, f"{label}: {cluster.name}")


GPU = CORE_RESOURCES.index("gpu")


def gpu_nodes_taken(job: SchedulingJob, cluster: Cluster, decision: Decision) -> int:
    """How many replicas of a job that asks for no GPU the decision puts on nodes with GPUs
    (0 for a GPU job): a CPU job there holds cores and memory a GPU job needs beside them."""
    if decision.assignment is None or job.total[GPU] > EPSILON:
        return 0
    capacity = cluster.nodes.capacity
    return sum(
        1 for placement in decision.assignment.placements if capacity[placement.row, GPU] > 0
    )


def leftover_share(job: SchedulingJob, cluster: Cluster) -> float:
    """Mean share of the cluster's capacity left free, on the resources the job asks for,
    after the job is placed: lower is a tighter fit."""
    wanted = np.flatnonzero(job.total)
    if len(wanted) == 0:
        return 0.0
    capacity = cluster.nodes.capacity[:, wanted].sum(axis=0)
    free_after = capacity - cluster.nodes.allocated[:, wanted].sum(axis=0) - job.total[wanted]
    share = np.divide(free_after, capacity, out=np.zeros_like(free_after), where=capacity > EPSILON)
    return float(share.mean())


def hourly_cost(job: SchedulingJob, cluster: Cluster, names: Sequence[str]) -> float:
    """Price of running the job for an hour on ``cluster``: sum of request × unit price.

    Memory is priced per GiB (``memory_gib``); any other resource by its own name.
    """
    total = 0.0
    for index, name in enumerate(names):
        amount = float(job.total[index])
        if amount <= 0:
            continue
        if name == "memory":
            total += amount / GIB * cluster.cost.get("memory_gib", 0.0)
        elif name == "gpu_memory":
            total += amount / GIB * cluster.cost.get("gpu_memory_gib", 0.0)
        else:
            total += amount * cluster.cost.get(name, 0.0)
    return total
