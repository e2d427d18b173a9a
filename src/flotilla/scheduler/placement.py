"""Placing one job on one cluster by running the profile's plugins replica by replica.

This is the framework's runtime (the part Kubernetes calls the framework runner): Filter and
Score are vectorised over the cluster's nodes, Reserve claims devices and plugin state, and a
failure anywhere rolls the whole job back — a job never holds part of what it needs.
"""

from __future__ import annotations

import numpy as np

from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import (
    Assignment,
    CycleState,
    Decision,
    FilterInput,
    Placement,
    PreBindInput,
    ReserveInput,
    ReservePlugin,
    ReserveResult,
)
from flotilla.framework.jobs import SchedulingJob, TaskRequest
from flotilla.framework.nodes import Mask
from flotilla.framework.registry import Framework
from flotilla.scheduler import node_index
from flotilla.scheduler.caches import EngineCaches
from flotilla.scheduler.failures import FailureKey
from flotilla.scheduler.node_index import placement_key
from flotilla.scheduler.topology import place_in_topology


class _Reservation:
    """What one replica claimed, so it can be released in reverse order."""

    def __init__(
        self, request: ReserveInput, results: list[tuple[ReservePlugin, ReserveResult]]
    ) -> None:
        self.request = request
        self.results = results


def place_job(
    framework: Framework,
    job: SchedulingJob,
    cluster: Cluster,
    cycle: CycleState,
    *,
    keep: bool,
    minimum: int | None = None,
    caches: EngineCaches | None = None,
) -> Decision:
    """Place every replica of ``job`` on ``cluster``.

    With ``keep`` the allocation stays in the cluster's node table (a commit on a snapshot);
    without it everything is rolled back and the decision only says where it would go.
    With ``minimum`` (a non-strict gang), replicas that do not fit are skipped and the job is
    placed when at least ``minimum`` of them fit. With ``caches`` (the engine's, made for
    this ``framework``) the fast paths answer where they can; the decision is the same.
    """
    if caches is not None and caches.framework is not framework:
        raise ValueError("place_job: the caches were made for another framework")
    if job.topology is not None:  # one domain of a level: placed domain by domain
        return place_in_topology(
            job,
            cluster,
            lambda part: place_job(
                framework, part, cluster, cycle, keep=keep, minimum=minimum, caches=caches
            ),
        )
    fast = caches if caches is not None and caches.row_local else None
    if minimum is None and len(job.tasks) == 1 and job.tasks[0].replicas == 1:
        return _place_one_replica(framework, job, cluster, cycle, keep=keep, caches=fast)
    return _place_replicas(framework, job, cluster, cycle, keep=keep, minimum=minimum, caches=fast)


def _place_replicas(
    framework: Framework,
    job: SchedulingJob,
    cluster: Cluster,
    cycle: CycleState,
    *,
    keep: bool,
    minimum: int | None,
    caches: EngineCaches | None,
) -> Decision:
    """``place_job`` for any job: replica by replica, rolling back on a failure."""
    nodes = cluster.nodes
    placements: list[Placement] = []
    reservations: list[_Reservation] = []
    first_miss: str | None = None

    def rollback() -> None:
        for placement, reservation in zip(
            reversed(placements), reversed(reservations), strict=True
        ):
            nodes.release(placement.row, placement.request, placement.gpus)
            for claimed, result in reversed(reservation.results):
                claimed.unreserve(reservation.request, result)

    for task in job.tasks:
        filter_input = FilterInput(job=job, task=task, cluster=cluster, cycle=cycle)
        for replica in range(task.replicas):
            row = _fit(framework, filter_input, caches)
            if isinstance(row, str):
                if minimum is not None:
                    if first_miss is None:
                        first_miss = _explain(filter_input, job, None, row)
                    continue
                reason = _explain(filter_input, job, len(placements), row)
                rollback()
                return Decision(None, f"{cluster.name}: {reason}")
            reserve_input = ReserveInput(
                job=job, task=task, replica=replica, cluster=cluster, row=row
            )
            results: list[tuple[ReservePlugin, ReserveResult]] = []
            failed: str | None = None
            for reserver in framework.reserves:
                result = reserver.reserve(reserve_input)
                if not result.status.ok:
                    failed = result.status.reason or f"{reserver.name} refused the reservation"
                    break
                results.append((reserver, result))
            if failed is not None:
                for claimed, result in reversed(results):
                    claimed.unreserve(reserve_input, result)
                rollback()
                return Decision(None, f"{cluster.name}: {failed}")
            gpus = next((r.gpus for _, r in results if r.gpus is not None), None)
            nodes.allocate(row, task.request, gpus)
            placements.append(
                Placement(
                    task=task.name,
                    replica=replica,
                    node=nodes.names[row],
                    row=row,
                    request=task.request,
                    gpus=gpus,
                )
            )
            reservations.append(_Reservation(reserve_input, results))

    if minimum is not None and len(placements) < minimum:
        placed = len(placements)
        rollback()
        return Decision(
            None,
            f"{cluster.name}: {_gang_label(job)} {placed}/{minimum} placeable"
            + (f"; {first_miss}" if first_miss else ""),
        )
    assignment = _pre_bind(
        framework, job, Assignment(cluster=cluster.name, placements=tuple(placements))
    )
    if not keep:
        rollback()
    return Decision(assignment, f"placed on {cluster.name}")


def _place_one_replica(
    framework: Framework,
    job: SchedulingJob,
    cluster: Cluster,
    cycle: CycleState,
    *,
    keep: bool,
    caches: EngineCaches | None,
) -> Decision:
    """``place_job`` for the common job of one task with one replica: the same steps and
    results, without the per-replica bookkeeping a rollback of several replicas needs."""
    nodes = cluster.nodes
    task = job.tasks[0]
    filter_input = FilterInput(job=job, task=task, cluster=cluster, cycle=cycle)
    row = _fit(framework, filter_input, caches)
    if isinstance(row, str):
        return Decision(None, f"{cluster.name}: {_explain(filter_input, job, 0, row)}")
    reserve_input = ReserveInput(job=job, task=task, replica=0, cluster=cluster, row=row)
    results: list[tuple[ReservePlugin, ReserveResult]] = []
    gpus = None
    for reserver in framework.reserves:
        result = reserver.reserve(reserve_input)
        if not result.status.ok:
            for claimed, done in reversed(results):
                claimed.unreserve(reserve_input, done)
            failed = result.status.reason or f"{reserver.name} refused the reservation"
            return Decision(None, f"{cluster.name}: {failed}")
        results.append((reserver, result))
        if gpus is None:
            gpus = result.gpus
    nodes.allocate(row, task.request, gpus)
    placement = Placement(
        task=task.name, replica=0, node=nodes.names[row], row=row, request=task.request, gpus=gpus
    )
    assignment = Assignment(cluster=cluster.name, placements=(placement,))
    if framework.pre_binds:
        assignment = _pre_bind(framework, job, assignment)
    if not keep:
        nodes.release(row, task.request, gpus)
        for claimed, result in reversed(results):
            claimed.unreserve(reserve_input, result)
    return Decision(assignment, f"placed on {cluster.name}")


def _fit(framework: Framework, request: FilterInput, caches: EngineCaches | None) -> int | str:
    """The best node's row for one replica or, when no node fits, why: the filters'
    details for ``_explain``.

    ``caches`` is given only for a row-local profile in which both depend only on the
    table's content and the request's placement-relevant fields: a failure is then
    remembered under ``(table version, placement key)`` (``scheduler.failures``) and the
    next identical request on the same content skips the filters and the explanation."""
    key: FailureKey | None = None
    seen: dict[int, Mask] = {}
    if caches is not None:
        nodes = request.cluster.nodes
        key = (nodes.version, placement_key(request.job, request.task))
        details = caches.failures.get(key)
        if details is not None:
            return details
        # The table's incremental index answers first (the same node, see ``node_index``);
        # the full scan runs when it cannot, and to explain a failure.
        if len(nodes) >= node_index.MIN_NODES:
            row = caches.best_node_index(nodes).best_node(request)
            if row is not None:
                return row
    row = _scan_best_node(framework, request, seen)
    if row is not None:
        return row
    details = _details(framework, request, seen)
    if key is not None and caches is not None:
        caches.failures.put(key, details)
    return details


def _scan_best_node(
    framework: Framework, request: FilterInput, seen: dict[int, Mask] | None = None
) -> int | None:
    """The best node by running every filter over every node and every score over the
    candidates: the reference the index must agree with. ``seen`` collects each filter's
    mask (by position) so that explaining a failure does not filter again."""
    everywhere = request.cluster.nodes.everywhere
    mask = everywhere
    for position, plugin in enumerate(framework.filters):
        plugin_mask = plugin.filter(request)
        if seen is not None:
            seen[position] = plugin_mask
        if plugin_mask is everywhere:
            continue
        mask = plugin_mask if mask is everywhere else mask & plugin_mask
        if not mask.any():
            return None
    candidates = np.flatnonzero(mask)
    if len(candidates) == 0:
        return None
    if len(candidates) == 1 or not framework.scores:
        return int(candidates[0])
    total = node_index.total_scores(framework, request, candidates)
    # argmax keeps the first of equal scores: ties go to declaration order.
    return int(candidates[int(np.argmax(total))])


def _pre_bind(framework: Framework, job: SchedulingJob, assignment: Assignment) -> Assignment:
    """The assignment with the annotations every PreBind plugin adds (unchanged without any)."""
    annotations: dict[str, str] = {}
    for plugin in framework.pre_binds:
        annotations.update(
            plugin.pre_bind(PreBindInput(job=job, assignment=assignment)).annotations
        )
    if annotations:
        return Assignment(assignment.cluster, assignment.placements, annotations)
    return assignment


def _gang_label(job: SchedulingJob) -> str:
    if job.gang is not None and job.gang.name:
        return f"gang {job.gang.name}"
    return f"gang {job.name}"


def _explain(request: FilterInput, job: SchedulingJob, placed: int | None, details: str) -> str:
    """Why no node is left for the next replica: a head naming the request (and, for a job
    of several replicas, how many were placed) followed by the filters' ``details``."""
    task: TaskRequest = request.task
    total = job.replica_count
    space = request.cluster.nodes.space
    head = f"no node fits {task.name} ({space.describe(task.request)})"
    if placed is not None and job.gang is not None:
        head = f"{_gang_label(job)} {placed}/{total} placeable; " + head
    elif placed is not None and total > 1:
        head = f"only {placed} of {total} replicas placeable; " + head
    return head + details


def _details(framework: Framework, request: FilterInput, seen: dict[int, Mask]) -> str:
    """What each filter says about the nodes it rejected (reusing the ``seen`` masks of the
    failed search), as the suffix of ``_explain``'s text: ``""`` when none says anything."""
    details = []
    for position, plugin in enumerate(framework.filters):
        mask = seen.get(position)
        if mask is None:
            mask = plugin.filter(request)
        if mask is request.cluster.nodes.everywhere:
            continue
        rejected = ~mask
        if rejected.any():
            text = plugin.explain(request, rejected)
            if text:
                details.append(text)
    return ": " + "; ".join(details) if details else ""
