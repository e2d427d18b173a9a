"""Topology-aware placement: a job's replicas within one domain of a network level.

A cluster declares its levels as node-label keys, widest first (``topology: [block, rack,
host]``); a domain of level ``rack`` is the nodes that share their ``block`` and ``rack``
labels (a rack name may repeat in another block). A job asks ``topology: {required: rack}``
or ``{preferred: rack}``.

The job is placed domain by domain as if it also required the domain's labels (node
affinity, so every filter, score and the GPU scopes inside a node apply as they do anywhere):
the tightest domain that can hold it first, i.e. the one whose free resources the job would
use the largest part of (best fit: large domains stay whole for large jobs). Domains whose
free resources summed cannot hold the job are not tried. ``required``: no domain can hold it
→ it waits, and the reason says so. ``preferred``: then it goes to the fewest domains
(``fewest_domains``, Kueue TAS's greedy rule): the domains with the most free first, the last
one the tightest that holds the rest; the job is placed on the nodes of those domains
(``SchedulingJob.node_domains``), one more domain at a time when it does not fit there, and
as if it asked nothing when not even every domain together holds it. A cluster that does not
declare the level is no candidate for either (Kueue's TAS leaves such flavors out alike).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import Decision
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.resources import EPSILON
from flotilla.model.job import Affinity, LabelAffinity

Domain = tuple[tuple[str, str], ...]
"""A domain as the labels its nodes share, widest level first."""

Place = Callable[[SchedulingJob], Decision]


def domains(cluster: Cluster, level: str) -> dict[Domain, list[int]]:
    """The domains of ``level`` on ``cluster`` and their nodes' rows (nodes lacking one of
    the labels down to ``level`` belong to none)."""
    keys = cluster.topology[: cluster.topology.index(level) + 1]
    found: dict[Domain, list[int]] = {}
    for row, node in enumerate(cluster.nodes.nodes):
        values = [node.labels.get(key) for key in keys]
        if any(value is None for value in values):
            continue
        domain = tuple((key, str(value)) for key, value in zip(keys, values, strict=True))
        found.setdefault(domain, []).append(row)
    return found


def tightest_first(
    cluster: Cluster, job: SchedulingJob, found: dict[Domain, list[int]]
) -> list[Domain]:
    """The domains whose free resources, summed, could hold ``job``, tightest first."""
    need = job.total
    asked = need > EPSILON
    ranked: list[tuple[float, int, Domain]] = []
    for order, (domain, rows) in enumerate(found.items()):
        free = cluster.nodes.free[rows].sum(axis=0)
        if np.any(free[asked] + EPSILON < need[asked]):
            continue
        part = float(np.max(need[asked] / free[asked])) if asked.any() else 0.0
        ranked.append((-part, order, domain))
    ranked.sort()
    return [domain for _, _, domain in ranked]


def _capacity(free: np.ndarray, need: np.ndarray, asked: np.ndarray) -> float:
    """How many times the job's total fits ``free`` (on the resources it asks for)."""
    if not asked.any():
        return 0.0
    return float(np.min(free[asked] / need[asked]))


def fewest_domains(
    cluster: Cluster, job: SchedulingJob, found: dict[Domain, list[int]]
) -> list[Domain]:
    """The domains to spread ``job`` over when no single one holds it, in the order they are
    added: greedily, the domain with the most free (the most copies of the job's total it
    could hold; ties to declaration order) while the rest does not fit one domain, then the
    tightest domain that holds the rest (Kueue TAS). The domains not needed for the job's
    summed total follow, most free first, so that a caller can widen one at a time."""
    need = job.total
    asked = need > EPSILON
    free = {domain: cluster.nodes.free[rows].sum(axis=0) for domain, rows in found.items()}
    left = sorted(found, key=lambda d: -_capacity(free[d], need, asked))  # stable: declared
    chosen: list[Domain] = []
    rest = need.copy()
    while left and np.any(rest[asked] > EPSILON):
        holds = [d for d in left if not np.any(free[d][asked] + EPSILON < rest[asked])]
        if holds:  # the last one: the tightest that holds the rest
            last = max(holds, key=lambda d: _part(rest, free[d], asked))
            chosen.append(last)
            left.remove(last)
            break
        chosen.append(left.pop(0))
        rest = np.maximum(rest - free[chosen[-1]], 0.0)
    return chosen + left


def _part(rest: np.ndarray, free: np.ndarray, asked: np.ndarray) -> float:
    """The largest part of ``free`` that ``rest`` uses (1 for a domain it fills); a stable
    ``max`` over it keeps declaration order among equals."""
    return float(np.max(rest[asked] / np.maximum(free[asked], EPSILON)))


def across_domains(job: SchedulingJob, chosen: tuple[Domain, ...]) -> SchedulingJob:
    """``job`` held to the nodes of ``chosen`` domains, with a placement key of its own."""
    return replace(
        job,
        topology=None,
        node_domains=chosen,
        placement_key=(*job.placement_key, ("domains", chosen)),
    )


def in_domain(job: SchedulingJob, domain: Domain) -> SchedulingJob:
    """``job`` also requiring ``domain``'s labels, with a placement key of its own."""
    nodes = job.affinity.nodes
    required = {**nodes.required, **dict(domain)}
    affinity = Affinity(
        clusters=job.affinity.clusters,
        nodes=LabelAffinity(required=required, preferred=nodes.preferred),
    )
    return replace(
        job,
        affinity=affinity,
        topology=None,
        placement_key=(*job.placement_key, ("domain", domain)),
    )


def place_in_topology(job: SchedulingJob, cluster: Cluster, place: Place) -> Decision:
    """Place ``job`` (which asks for a topology level) on ``cluster`` with ``place``."""
    request = job.topology
    assert request is not None
    level = request.level
    if level not in cluster.topology:
        # Not a candidate, for ``preferred`` as for ``required`` (as Kueue's TAS leaves out
        # a flavor without the level): the job goes to a cluster that can honour it.
        levels = ", ".join(cluster.topology) or "none"
        return Decision(
            None,
            f"{cluster.name}: topology level {level!r} is not one of the cluster's "
            f"(topology: {levels})",
        )
    found = domains(cluster, level)
    first_reason: str | None = None
    tried = 0
    for domain in tightest_first(cluster, job, found):
        decision = place(in_domain(job, domain))
        if decision.assignment is not None:
            return decision
        tried += 1
        if first_reason is None:
            first_reason = decision.reason.removeprefix(f"{cluster.name}: ")
    if request.required is None:
        return _place_across_domains(job, cluster, found, place)
    replicas = job.replica_count
    detail = (
        f"; the tightest: {first_reason}"
        if first_reason
        else " (none has enough free resources in total)"
    )
    return Decision(
        None,
        f"{cluster.name}: no {level} domain can hold all {replicas} replica"
        f"{'s' if replicas != 1 else ''} (topology required: {level}; {len(found)} domains, "
        f"{tried} tried){detail}",
    )


def _place_across_domains(
    job: SchedulingJob, cluster: Cluster, found: dict[Domain, list[int]], place: Place
) -> Decision:
    """A preferred job that no single domain holds: on the fewest domains whose free
    resources summed hold it, one more domain at a time while it does not fit there; as if it
    asked nothing when every domain together does not hold it."""
    order = fewest_domains(cluster, job, found)
    need = job.total
    asked = need > EPSILON
    total = np.zeros_like(need)
    for count, domain in enumerate(order, start=1):
        total = total + cluster.nodes.free[found[domain]].sum(axis=0)
        if count < 2 or np.any(total[asked] + EPSILON < need[asked]):
            continue  # one domain was tried already; these cannot hold it in total
        decision = place(across_domains(job, tuple(order[:count])))
        if decision.assignment is not None:
            return decision
    return place(replace(job, topology=None))
