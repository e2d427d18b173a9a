"""Synthetic fleets and workloads, built straight into engine objects (no YAML, no scenario).

Nodes become ``NodeInfo`` rows of a ``NodeTable``; jobs go through ``framework.jobs.build_job``
from one ``JobSpec`` per (shape, queue) — exactly what the simulator does for a ``count``-expanded
job — so the per-job memory and the placement keys are the engine's own.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from flotilla.framework.clusters import Cluster
from flotilla.framework.jobs import SchedulingJob, ShapeInterner, build_job
from flotilla.framework.nodes import NodeTable
from flotilla.framework.resources import ResourceSpace
from flotilla.model.cluster import Taint
from flotilla.model.job import JobSpec
from flotilla.model.node_info import NodeInfo
from flotilla.model.queue import Owners, QuotaSpec
from flotilla.scheduler.types import QueueInfo

GI = float(2**30)
GPU_TAINT = Taint(key="nvidia.com/gpu", value="present")


@dataclass(frozen=True)
class NodeShape:
    name: str
    cpu: float
    memory_gi: float
    gpus: int = 0
    weight: float = 1.0
    """Share of the fleet's nodes with this shape (normalised over the mix)."""


@dataclass(frozen=True)
class JobShape:
    name: str
    cpu: float
    memory_gi: float
    gpus: float = 0.0
    replicas: int = 1
    weight: float = 1.0
    """Share of the workload's jobs with this shape (normalised over the mix)."""


CPU_NODE = NodeShape("cpu", cpu=64, memory_gi=256, weight=0.8)
GPU_NODE = NodeShape("gpu8", cpu=96, memory_gi=1024, gpus=8, weight=0.2)

SINGLE_TASK_MIX: tuple[JobShape, ...] = (
    JobShape("cpu2", cpu=2, memory_gi=8, weight=0.25),
    JobShape("cpu4", cpu=4, memory_gi=16, weight=0.25),
    JobShape("cpu8", cpu=8, memory_gi=32, weight=0.15),
    JobShape("cpu16", cpu=16, memory_gi=64, weight=0.10),
    JobShape("gpu1", cpu=8, memory_gi=64, gpus=1, weight=0.15),
    JobShape("gpu2", cpu=16, memory_gi=128, gpus=2, weight=0.05),
    JobShape("gpu4", cpu=32, memory_gi=256, gpus=4, weight=0.03),
    JobShape("gpu8", cpu=64, memory_gi=512, gpus=8, weight=0.02),
)

MULTI_REPLICA_MIX: tuple[JobShape, ...] = (
    JobShape("gpu1x2", cpu=8, memory_gi=64, gpus=1, replicas=2, weight=0.3),
    JobShape("gpu2x4", cpu=16, memory_gi=128, gpus=2, replicas=4, weight=0.3),
    JobShape("gpu8x2", cpu=64, memory_gi=512, gpus=8, replicas=2, weight=0.2),
    JobShape("gpu8x8", cpu=64, memory_gi=512, gpus=8, replicas=8, weight=0.2),
)

OVERSIZED = JobShape("oversized", cpu=1024, memory_gi=4096, weight=1.0)
"""Larger than any node: can never be placed, so a cycle over these schedules nothing."""


@dataclass(frozen=True)
class FleetParams:
    nodes: int
    clusters: int = 1
    shapes: tuple[NodeShape, ...] = (CPU_NODE, GPU_NODE)
    taint_gpu_nodes: bool = True
    """GPU nodes carry ``nvidia.com/gpu=present:NoSchedule``; GPU jobs tolerate it."""
    zones: int = 4
    """Each node gets a ``zone`` label (``z0`` …) round-robin."""


@dataclass(frozen=True)
class WorkloadParams:
    jobs: int
    queues: int = 100
    shapes: tuple[JobShape, ...] = SINGLE_TASK_MIX
    priorities: tuple[int, ...] = (0, 0, 0, 100)
    """Drawn uniformly: here one job in four has priority 100."""
    weight_skew: float = 1.0
    """Queue i has weight 1 + (i mod 4) * (skew - 1) / 3: 1.0 gives equal weights."""
    quota_tree: bool = False
    """Build a quota tree (org → divisions → teams) over the queues; the engine enforces it."""
    seed: int = 1
    owners: int = 0
    """With N > 0: each queue's jobs are owned by ``u0 … u(N-1)`` in turn, and every queue
    shares itself among its owners by DRF (``queues[].owners``; ``u0`` weight 2) with at most
    ``OWNER_MAX_RUNNING`` running jobs per owner."""
    owner_overrides: bool = False
    """With ``owners``: ``u1`` has its own limit (``owners.limits``, issue 28) of twice that."""


OWNER_MAX_RUNNING = 8
"""Per-owner running jobs per queue with ``owners``: headline-5k reduced to 10,000 jobs has
100 per queue, so with 10 owners (10 jobs each) the limit holds a fifth of them."""


@dataclass
class Fleet:
    space: ResourceSpace
    clusters: list[Cluster]

    @property
    def nodes(self) -> int:
        return sum(len(cluster.nodes) for cluster in self.clusters)

    def capacity(self) -> dict[str, float]:
        total = sum((c.total_capacity() for c in self.clusters), start=self.space.zeros())
        return self.space.as_dict(total)


@dataclass
class Workload:
    queues: list[QueueInfo]
    jobs: list[SchedulingJob]
    quotas: list[QuotaSpec] = field(default_factory=list)
    queue_quota: dict[str, str] = field(default_factory=dict)


def space() -> ResourceSpace:
    return ResourceSpace(["cpu", "memory", "gpu"])


def _apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Split ``total`` into integer counts proportional to ``weights`` (largest remainder)."""
    w = np.asarray(weights, dtype=float)
    exact = total * w / w.sum()
    counts = np.floor(exact).astype(int)
    for index in np.argsort(-(exact - counts))[: total - int(counts.sum())]:
        counts[index] += 1
    return [int(c) for c in counts]


def _interleave(counts: Sequence[int]) -> list[int]:
    """Shape indices, interleaved so that every prefix has roughly the mix's proportions."""
    positions = [(np.arange(c) + 0.5) / c for c in counts]
    labels = [np.full(c, i) for i, c in enumerate(counts)]
    if not positions:
        return []
    order = np.argsort(np.concatenate(positions), kind="stable")
    merged: list[int] = np.concatenate(labels)[order].tolist()
    return merged


def build_fleet(params: FleetParams) -> Fleet:
    resource_space = space()
    per_cluster = _apportion(params.nodes, [1.0] * params.clusters)
    clusters = []
    serial = itertools.count()
    for order, count in enumerate(per_cluster):
        infos = []
        shape_counts = _apportion(count, [s.weight for s in params.shapes])
        for shape, shape_count in zip(params.shapes, shape_counts, strict=True):
            taints = (GPU_TAINT,) if shape.gpus and params.taint_gpu_nodes else ()
            capacity = {"cpu": shape.cpu, "memory": shape.memory_gi * GI, "gpu": float(shape.gpus)}
            for _ in range(shape_count):
                index = next(serial)
                infos.append(
                    NodeInfo(
                        name=f"{shape.name}-{index}",
                        capacity=capacity,
                        labels={"pool": shape.name, "zone": f"z{index % params.zones}"},
                        taints=taints,
                        gpu_count=shape.gpus,
                    )
                )
        clusters.append(
            Cluster(
                name=f"c{order}",
                order=order,
                labels={"region": f"r{order}"},
                cost={},
                nodes=NodeTable(resource_space, infos),
            )
        )
    return Fleet(resource_space, clusters)


def job_spec(shape: JobShape, queue: str) -> JobSpec:
    resources: dict[str, float] = {"cpu": shape.cpu, "memory": shape.memory_gi * GI}
    if shape.gpus:
        resources["gpu"] = shape.gpus
    data: dict[str, object] = {
        "name": shape.name,
        "queue": queue,
        "tasks": [{"name": "main", "replicas": shape.replicas, "resources": resources}],
    }
    if shape.gpus:
        data["tolerations"] = [{"key": GPU_TAINT.key, "operator": "Exists"}]
    return JobSpec.model_validate(data)


def queue_infos(params: WorkloadParams) -> list[QueueInfo]:
    step = (params.weight_skew - 1.0) / 3.0
    owners = _owners(params) if params.owners else None
    return [
        QueueInfo(name=f"q{i:03d}", weight=1.0 + (i % 4) * step, order=i, owners=owners)
        for i in range(params.queues)
    ]


def _owners(params: WorkloadParams) -> Owners:
    data: dict[str, object] = {"weights": {"u0": 2}, "max_running_jobs": OWNER_MAX_RUNNING}
    if params.owner_overrides:  # only a tree with owners.limits knows the field
        data["limits"] = {"u1": {"max_running_jobs": 2 * OWNER_MAX_RUNNING}}
    return Owners.model_validate(data)


def build_jobs(
    params: WorkloadParams,
    resource_space: ResourceSpace,
    queues: Sequence[QueueInfo],
    *,
    count: int | None = None,
    start: int = 0,
    prefix: str = "j",
    shapes: ShapeInterner | None = None,
) -> list[SchedulingJob]:
    """``count`` jobs (default ``params.jobs``), round-robin over queues, shapes interleaved;
    jobs built alike share their shapes (through ``shapes``, or an interner of this call),
    as the simulator's and the service's jobs do."""
    count = params.jobs if count is None else count
    shapes = ShapeInterner() if shapes is None else shapes
    rng = np.random.default_rng(params.seed + start)
    specs: dict[tuple[int, int], JobSpec] = {}
    shape_counts = _apportion(count, [s.weight for s in params.shapes])
    shape_order = _interleave(shape_counts)
    priorities = rng.choice(np.asarray(params.priorities), size=count).tolist()
    jobs = []
    for i in range(count):
        sequence = start + i
        q = sequence % len(queues)
        s = shape_order[i]
        spec = specs.get((s, q))
        if spec is None:
            spec = specs[(s, q)] = job_spec(params.shapes[s], queues[q].name)
        jobs.append(
            build_job(
                spec,
                name=f"{prefix}{sequence}",
                space=resource_space,
                sequence=sequence,
                submit_time=0.0,
                priority=int(priorities[i]),
                preemptible=True,
                shapes=shapes,
                # Every queue gets every owner: jobs go round-robin over the queues first.
                owner=f"u{(sequence // len(queues)) % params.owners}" if params.owners else None,
            )
        )
    return jobs


def quota_tree(
    queues: Sequence[QueueInfo], capacity: dict[str, float]
) -> tuple[list[QuotaSpec], dict[str, str]]:
    """org → 4 divisions → teams of up to 10 queues each; min splits the fleet evenly, max is
    twice the min (borrowing). Returns the tree and the queue → quota mapping."""
    divisions = 4
    teams = max(1, (len(queues) + 9) // 10)
    team_min = {k: v / teams for k, v in capacity.items() if v > 0}
    team_nodes: list[list[QuotaSpec]] = [[] for _ in range(divisions)]
    mapping = {}
    for t in range(teams):
        team = QuotaSpec(
            name=f"team-{t:02d}",
            min=team_min,
            max={k: 2 * v for k, v in team_min.items()},
        )
        team_nodes[t % divisions].append(team)
        for queue in queues[t * 10 : (t + 1) * 10]:
            mapping[queue.name] = team.name
    division_specs = [
        QuotaSpec(name=f"division-{d}", children=children)
        for d, children in enumerate(team_nodes)
        if children
    ]
    return [QuotaSpec(name="org", max=dict(capacity), children=division_specs)], mapping


def build_workload(params: WorkloadParams, fleet: Fleet) -> Workload:
    queues = queue_infos(params)
    jobs = build_jobs(params, fleet.space, queues)
    workload = Workload(queues=queues, jobs=jobs)
    if params.quota_tree:
        workload.quotas, workload.queue_quota = quota_tree(queues, fleet.capacity())
    return workload
