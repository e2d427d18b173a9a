"""Drive ``SchedulingAlgorithm.schedule`` directly over repeated cycles, as the simulator does.

Protocol of one engine case:

1. Build the fleet and the backlog (all jobs queued at t=0). Optionally *prefill* the fleet:
   the harness places synthetic running jobs first-fit, outside the timed region, so that big
   fleets can be measured near full without paying the engine's own fill time.
2. Cycle: snapshot (clusters, queues, queued, running) → ``schedule`` (timed) → apply the
   placements to the node tables and move the jobs from queued to running.
3. Between cycles, ``churn`` of the running jobs finish (seeded random) and release their
   nodes, so every later cycle places again and also rescans the whole remaining backlog.
4. Stop after ``cycles`` cycles, when the time budget is spent (checked between cycles: a cycle
   is never interrupted), or when nothing can change any more.

Only ``schedule`` is timed. Snapshot building and applying are harness costs, reported apart.
"""

from __future__ import annotations

import gc
import os
import resource
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from bench.generators import (
    Fleet,
    FleetParams,
    Workload,
    WorkloadParams,
    build_fleet,
    build_jobs,
    build_workload,
)
from flotilla.framework.interfaces import Assignment, Placement
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.nodes import GpuAllocation
from flotilla.framework.quota import QuotaTree
from flotilla.framework.resources import EPSILON
from flotilla.scheduler import (
    BacklogView,
    RunningJob,
    SchedulingAlgorithm,
    SchedulingConfig,
    SchedulingSnapshot,
)

MEMORY_SAMPLE = 10_000
"""Jobs built under tracemalloc to measure bytes per queued job (then extrapolated)."""


@dataclass(frozen=True)
class EngineCase:
    name: str
    description: str
    fleet: FleetParams
    workload: WorkloadParams
    cycles: int = 5
    churn: float = 0.05
    prefill: float = 0.0
    """Fraction of the fleet's dominant capacity filled by the harness before cycle 1."""
    budget_s: float = 60.0
    """Time allowed for the cycles (building and prefill excluded); checked between cycles."""
    config: SchedulingConfig = field(
        default_factory=lambda: SchedulingConfig(assignment_strategy="cluster-only")
    )
    """The cases were calibrated with ``cluster-only`` (the engine's default before it became
    ``resource-aware``); pinned so that figures stay comparable across that change."""
    tags: tuple[str, ...] = ()


def current_rss() -> int:
    """Resident set size now, in bytes (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - not Linux
        return 0


def peak_rss() -> int:
    """Peak resident set size of this process, in bytes (``getrusage`` ru_maxrss, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def bytes_per_job(params: WorkloadParams, fleet: Fleet, sample: int = MEMORY_SAMPLE) -> float:
    """tracemalloc'd bytes held per job built by the generator (``build_job``), on a sample."""
    queues = build_workload(WorkloadParams(jobs=0, queues=params.queues), fleet).queues
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        jobs = build_jobs(params, fleet.space, queues, count=sample, start=10**9)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    del jobs
    return held / sample


@dataclass
class _Running:
    job: SchedulingJob
    cluster: int
    placements: Sequence[Placement]
    record: RunningJob


def _prefill(
    fleet: Fleet, workload: WorkloadParams, queues: Sequence[Any], fraction: float
) -> list[_Running]:
    """Synthetic running jobs, node by node, until each node's dominant use reaches ``fraction``.

    Jobs come from the workload's own shape mix; taints and GPU devices are respected, so the
    engine sees node tables exactly as if it had placed these jobs itself.
    """
    running: list[_Running] = []
    if fraction <= 0:
        return running
    templates = build_jobs(
        WorkloadParams(jobs=0, queues=workload.queues, shapes=workload.shapes, seed=workload.seed),
        fleet.space,
        queues,
        count=1024,
        prefix="pre-",
    )
    serial = 0
    for c, cluster in enumerate(fleet.clusters):
        nodes = cluster.nodes
        for row in range(len(nodes)):
            capacity = nodes.capacity[row]
            dims = capacity > EPSILON
            tainted = bool(nodes.hard_taints[row])
            misses = 0
            while misses < 16:
                used = nodes.allocated[row][dims] / capacity[dims]
                if used.max(initial=0.0) >= fraction:
                    break
                template = templates[serial % len(templates)]
                serial += 1
                task = template.tasks[0]
                if tainted and not template.tolerations:
                    misses += 1
                    continue
                if not _fits(nodes, row, task.request, task.replicas):
                    misses += 1
                    continue
                placements = []
                for replica in range(task.replicas):
                    gpus = _devices(nodes, row, int(task.gpu))
                    nodes.allocate(row, task.request, gpus)
                    placements.append(
                        Placement(task.name, replica, nodes.names[row], row, task.request, gpus)
                    )
                job = _renamed(template, f"pre-{serial}")
                assignment = Assignment(cluster.name, tuple(placements))
                running.append(_Running(job, c, placements, RunningJob(job, assignment)))
    return running


def _renamed(job: SchedulingJob, name: str) -> SchedulingJob:
    return replace(job, name=name)


def _fits(nodes: Any, row: int, request: Any, replicas: int) -> bool:
    """All replicas on this one node (prefill keeps a job's replicas together)."""
    free = nodes.capacity[row] - nodes.allocated[row]
    return bool(np.all(free >= request * replicas - EPSILON))


def _devices(nodes: Any, row: int, gpus: int) -> GpuAllocation | None:
    if gpus <= 0:
        return None
    devices = np.flatnonzero(nodes.device_free[row] >= 1.0 - EPSILON)[:gpus]
    return GpuAllocation(tuple((int(d), 1.0) for d in devices))


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else 0.0


def _dominant_use(fleet: Fleet) -> float:
    allocated = sum(
        (c.nodes.allocated.sum(axis=0) for c in fleet.clusters), start=fleet.space.zeros()
    )
    capacity = sum((c.total_capacity() for c in fleet.clusters), start=fleet.space.zeros())
    share = np.divide(allocated, capacity, out=np.zeros_like(allocated), where=capacity > EPSILON)
    return float(share.max(initial=0.0))


def run_engine_case(case: EngineCase, *, measure_memory: bool = True) -> dict[str, Any]:
    started = time.perf_counter()
    rng = np.random.default_rng(case.workload.seed)
    fleet = build_fleet(case.fleet)
    gc.collect()
    rss_before = current_rss()
    t0 = time.perf_counter()
    workload: Workload = build_workload(case.workload, fleet)
    build_s = time.perf_counter() - t0
    rss_jobs = current_rss() - rss_before
    t0 = time.perf_counter()
    prefilled = _prefill(fleet, case.workload, workload.queues, case.prefill)
    prefill_s = time.perf_counter() - t0
    algorithm = SchedulingAlgorithm(case.config)
    clusters = fleet.clusters
    cluster_index = {cluster.name: i for i, cluster in enumerate(clusters)}
    queued: dict[str, SchedulingJob] = {job.name: job for job in workload.jobs}
    # Kept grouped by queue in priority-sort order, as the simulator keeps its backlog, so
    # the run neither groups nor sorts it (built once here, outside the timed region).
    backlog: dict[str, dict[str, SchedulingJob]] = {queue.name: {} for queue in workload.queues}
    for job in sorted(
        queued.values(), key=lambda job: (-job.priority, job.submit_time, job.sequence)
    ):
        backlog.setdefault(job.queue, {})[job.name] = job
    # The quota tree is enforced: every queue draws on its team's quota (elastic quota plugin).
    quotas = QuotaTree(workload.quotas, fleet.space) if workload.quotas else None
    queues = [
        replace(queue, quota=workload.queue_quota.get(queue.name)) for queue in workload.queues
    ]
    del workload.jobs[:]
    running: dict[str, _Running] = {r.job.name: r for r in prefilled}
    fill_after_prefill = _dominant_use(fleet)

    cycles_started = time.perf_counter()
    cycle_seconds: list[float] = []
    cpu_seconds: list[float] = []
    cycles: list[dict[str, Any]] = []
    harness_s = 0.0
    stop = "cycles"
    for index in range(case.cycles):
        h0 = time.perf_counter()
        snapshot = SchedulingSnapshot(
            time=float(index),
            clusters=clusters,
            queues=queues,
            queued=list(queued.values()),
            backlog=BacklogView({name: tuple(jobs.values()) for name, jobs in backlog.items()}),
            running=[r.record for r in running.values()],
            quotas=quotas,
        )
        harness_s += time.perf_counter() - h0
        c0, p0 = time.perf_counter(), time.process_time()
        result = algorithm.schedule(snapshot)
        seconds = time.perf_counter() - c0
        cpu_seconds.append(time.process_time() - p0)
        h0 = time.perf_counter()
        replicas = 0
        for scheduled in result.scheduled:
            c = cluster_index[scheduled.assignment.cluster]
            nodes = clusters[c].nodes
            for p in scheduled.assignment.placements:
                nodes.allocate(p.row, p.request, p.gpus)
            replicas += len(scheduled.assignment.placements)
            job = queued.pop(scheduled.job.name)
            del backlog[job.queue][job.name]
            running[job.name] = _Running(
                job, c, scheduled.assignment.placements, RunningJob(job, scheduled.assignment)
            )
        cycle_seconds.append(seconds)
        cycles.append(
            {
                "cycle": index,
                "seconds": seconds,
                "queued_before": len(snapshot.queued),
                "running_before": len(snapshot.running),
                "considered": result.stats.considered,
                "scheduled": result.stats.scheduled,
                "replicas": replicas,
                "cache_hits": result.stats.cache_hits,
                "fleet_use_after": _dominant_use(fleet),
            }
        )
        del snapshot, result
        if time.perf_counter() - cycles_started > case.budget_s and index + 1 < case.cycles:
            stop = f"time budget {case.budget_s:g}s"
            harness_s += time.perf_counter() - h0
            break
        if not queued:
            stop = "backlog empty"
            harness_s += time.perf_counter() - h0
            break
        if case.churn > 0 and running:
            names = list(running)
            finished = rng.choice(len(names), size=int(len(names) * case.churn), replace=False)
            for i in finished.tolist():
                done = running.pop(names[i])
                nodes = clusters[done.cluster].nodes
                for p in done.placements:
                    nodes.release(p.row, p.request, p.gpus)
        elif cycles[-1]["scheduled"] == 0:
            stop = "nothing can change"
            harness_s += time.perf_counter() - h0
            break
        harness_s += time.perf_counter() - h0

    engine_s = sum(cycle_seconds)
    engine_cpu_s = sum(cpu_seconds)
    placed = sum(c["scheduled"] for c in cycles)
    replicas = sum(c["replicas"] for c in cycles)
    considered = sum(c["considered"] for c in cycles)
    placing = [c for c in cycles if c["scheduled"]]
    placing_s = sum(c["seconds"] for c in placing)
    result_row: dict[str, Any] = {
        "kind": "engine",
        "case": case.name,
        "description": case.description,
        "tags": list(case.tags),
        "params": {
            "nodes": fleet.nodes,
            "clusters": len(fleet.clusters),
            "node_shapes": [s.name for s in case.fleet.shapes],
            "queues": case.workload.queues,
            "jobs": case.workload.jobs,
            "job_shapes": [s.name for s in case.workload.shapes],
            "priorities": sorted(set(case.workload.priorities)),
            "quota_tree": case.workload.quota_tree,
            "quota_tree_nodes": _count_quotas(workload.quotas),
            "quota_tree_enforced": quotas is not None,
            "prefill": case.prefill,
            "churn": case.churn,
            "max_cycles": case.cycles,
            "budget_s": case.budget_s,
            "fair_share": case.config.fair_share.value,
            "strategy": case.config.assignment_strategy,
            "profile": case.config.profile,
        },
        "fleet_use_after_prefill": fill_after_prefill,
        "prefill_running_jobs": len(prefilled),
        "build_jobs_s": build_s,
        "prefill_s": prefill_s,
        "harness_s": harness_s,
        "stop": stop,
        "cycles": cycles,
        "cycle_count": len(cycles),
        "engine_s": engine_s,
        "engine_cpu_s": engine_cpu_s,
        "cpu_share": engine_cpu_s / engine_s if engine_s else None,
        "placements_per_cpu_s": placed / engine_cpu_s if engine_cpu_s else 0.0,
        "placements": placed,
        "replicas_placed": replicas,
        "decisions": considered,
        "placements_per_s": placed / placing_s if placing_s else 0.0,
        "us_per_placement": placing_s / placed * 1e6 if placed else None,
        "decisions_per_s": considered / engine_s if engine_s else 0.0,
        "us_per_decision": engine_s / considered * 1e6 if considered else None,
        "cycle_p50_s": _percentile(cycle_seconds, 50),
        "cycle_p99_s": _percentile(cycle_seconds, 99),
        "cycle_max_s": max(cycle_seconds, default=0.0),
        "rss_jobs_bytes": rss_jobs,
        "rss_bytes_per_job": rss_jobs / case.workload.jobs if case.workload.jobs else None,
        "wall_s": time.perf_counter() - started,
    }
    if measure_memory:
        result_row["bytes_per_queued_job"] = bytes_per_job(case.workload, fleet)
        result_row["bytes_per_queued_job_method"] = (
            f"tracemalloc over {MEMORY_SAMPLE} jobs built by build_job"
        )
    result_row["peak_rss_bytes"] = peak_rss()
    return result_row


def _count_quotas(quotas: Sequence[Any]) -> int:
    return sum(1 + _count_quotas(q.children) for q in quotas)
