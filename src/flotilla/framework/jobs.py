"""The scheduler's view of a job (Michelangelo's ``BatchJob``), with requests as vectors,
and the ``ShapeInterner`` that lets jobs built alike share their vectors and placement key."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from flotilla.framework.resources import ResourceSpace, Vector
from flotilla.model.job import (
    Affinity,
    GangSpec,
    JobSpec,
    JobTopology,
    Toleration,
    TopologyScope,
)


@dataclass(frozen=True, eq=False)
class TaskRequest:
    """One task group: ``replicas`` copies of ``request``."""

    name: str
    replicas: int
    request: Vector
    gpu: float
    gpu_memory: float
    gpu_scope: TopologyScope | None
    resources: Mapping[str, float]
    share_gpu: bool = False
    """The task's fractions may share a device with others that opt in (``gpu_sharing:
    none``); see ``plugins/devices.py``."""
    wanted: npt.NDArray[np.intp] = field(init=False)
    """Positions of the resources it asks for: filters and scores look only at these."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "wanted", np.flatnonzero(self.request))


@dataclass(frozen=True, eq=False, slots=True)
class SchedulingJob:
    """An immutable job as the engine sees it. Identity is the job name."""

    name: str
    queue: str
    priority: int
    preemptible: bool
    submit_time: float
    sequence: int
    """Submission order across the whole system: the final tie-breaker everywhere."""
    tasks: tuple[TaskRequest, ...]
    total: Vector
    """Sum of every replica's request: what the job takes from its queue's share."""
    affinity: Affinity = field(default_factory=Affinity)
    tolerations: tuple[Toleration, ...] = ()
    gang: GangSpec | None = None
    job_type: str = "command"
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    user: str | None = None
    expected_runtime: float | None = None
    placement_key: tuple[object, ...] = ()
    """Equal for jobs that can be placed exactly alike (same shapes and constraints)."""
    topology: JobTopology | None = None
    """All replicas within one domain of a cluster's topology level (``scheduler/topology.py``)."""
    node_domains: tuple[tuple[tuple[str, str], ...], ...] = ()
    """When set, a node must carry every label of one of these domains (``(key, value)``
    pairs, widest level first): a preferred topology level spread over the fewest domains
    (``scheduler/topology.py``). The node-affinity filter applies it."""
    min_runtime: float | None = None
    """Not a preemption victim during its run's first ``min_runtime`` seconds."""
    checkpoint_every: float | None = None
    """Saves its work every this many seconds of its run (``framework/preemption.py``)."""
    replica_count: int = field(init=False)
    """Replicas over every task (computed once: read on every cycle's hot paths)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "replica_count", sum(task.replicas for task in self.tasks))


@dataclass(frozen=True, slots=True)
class _Shape:
    """What every job built from one spec shares: its tasks, total and placement key."""

    spec: weakref.ref[JobSpec]
    """The spec it was built from, weakly: a shape must not keep a finished job's spec."""
    tasks: tuple[TaskRequest, ...]
    total: Vector
    key: tuple[object, ...]
    tolerations: tuple[Toleration, ...]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]


ShapeKey = tuple[int, int, int, int, int, tuple[str, ...]]

SHAPES_LIMIT = 200_000
"""Shapes (and placement keys) an interner keeps before it starts afresh: a few hundred
bytes each."""

TRIM_SLACK = 1_000
"""Shapes ``ShapeInterner.trim`` lets its owner keep beyond twice its live jobs."""


class ShapeInterner:
    """The shared parts of jobs built from one spec (Armada's injected string interner).

    Jobs expanded from one spec, or submitted alike, then share their vectors and one
    placement-key object: less memory per queued job, and equal shapes compare by identity.
    Its owner injects it into ``build_job`` (the simulator, the service's snapshot builder);
    without one every job gets its own shape, which is correct, only larger and slower to
    compare. Bounded: when full it is emptied, which only costs sharing.
    """

    __slots__ = ("_keys", "_shapes", "limit")

    def __init__(self, limit: int = SHAPES_LIMIT) -> None:
        self.limit = limit
        self._shapes: dict[ShapeKey, _Shape] = {}
        self._keys: dict[tuple[object, ...], tuple[object, ...]] = {}

    def __len__(self) -> int:
        return len(self._shapes)

    def trim(self, live: int) -> None:
        """Start afresh when far more shapes are held than the ``live`` jobs its owner keeps
        can use: a spec parsed per job (the service's) shares no part with another, so each
        job that ever passed would leave a shape behind until ``limit``. Starting afresh only
        costs sharing."""
        if len(self._shapes) > 2 * live + TRIM_SLACK:
            self._shapes.clear()
            self._keys.clear()

    def shape(self, spec: JobSpec, space: ResourceSpace) -> _Shape:
        """The shape of jobs built from ``spec`` in ``space`` (one per spec parts and space)."""
        # Keyed by the space's names (its vector layout), not its id: an id can be reused by
        # a new space with another layout once the old one is gone. Keyed by the identity of
        # the parts a shape is built from, not of the spec: specs copied from one template
        # (``model_copy`` shares these objects) then share one shape. An entry is used only
        # while the spec it was built from lives (``shape.spec``, a weak reference) and
        # still holds those very parts, so an id reused after the parts died never matches.
        cache_key = (
            id(spec.tasks),
            id(spec.affinity),
            id(spec.tolerations),
            id(spec.labels),
            id(spec.annotations),
            space.names,
        )
        shape = self._shapes.get(cache_key)
        if shape is not None:
            built = shape.spec()
            if built is not None and _same_parts(built, spec):
                return shape
        shape = _build_shape(spec, space)
        keys = self._keys
        if len(keys) > self.limit:
            keys.clear()
        key = keys.setdefault(shape.key, shape.key)
        if key is not shape.key:
            shape = replace(shape, key=key)
        if len(self._shapes) > self.limit:
            self._shapes.clear()
        self._shapes[cache_key] = shape
        return shape


def _build_shape(spec: JobSpec, space: ResourceSpace) -> _Shape:
    """The vectors and placement key of jobs built from ``spec``."""
    tasks = []
    total = space.zeros()
    for task in spec.tasks:
        request = space.vector(task.resources)
        total += request * task.replicas
        tasks.append(
            TaskRequest(
                name=task.name,
                replicas=task.replicas,
                request=request,
                gpu=task.resources.get("gpu", 0.0),
                gpu_memory=task.resources.get("gpu_memory", 0.0),
                gpu_scope=task.topology.gpu if task.topology else None,
                resources=dict(task.resources),
                share_gpu=task.share_gpu,
            )
        )
    total.flags.writeable = False
    key: tuple[object, ...] = (
        tuple((t.replicas, tuple(t.request.tolist()), t.gpu_scope, t.share_gpu) for t in tasks),
        spec.affinity.model_dump_json(),
        tuple(t.model_dump_json() for t in spec.tolerated()),
    )
    return _Shape(
        spec=weakref.ref(spec),
        tasks=tuple(tasks),
        total=total,
        key=key,
        tolerations=spec.tolerated(),
        labels=dict(spec.labels),
        annotations=dict(spec.annotations),
    )


def _same_parts(built: JobSpec, spec: JobSpec) -> bool:
    """Whether ``spec`` holds the very objects ``built``'s shape was made from."""
    return (
        built.tasks is spec.tasks
        and built.affinity is spec.affinity
        and built.tolerations is spec.tolerations
        and built.labels is spec.labels
        and built.annotations is spec.annotations
    )


def _with_topology(key: tuple[object, ...], spec: JobSpec) -> tuple[object, ...]:
    """A placement key that tells a topology request apart (placed differently)."""
    assert spec.topology is not None
    return (*key, ("topology", spec.topology.required, spec.topology.preferred))


def build_job(
    spec: JobSpec,
    *,
    name: str,
    space: ResourceSpace,
    sequence: int,
    submit_time: float,
    priority: int,
    preemptible: bool,
    shapes: ShapeInterner | None = None,
    owner: str | None = None,
) -> SchedulingJob:
    """Turn a validated ``JobSpec`` into the engine's vectorised job; with ``shapes``, jobs
    built alike share their vectors and placement key. The job's ``user`` is the spec's,
    else ``owner`` (who submitted it): the owner that owner-level fairness counts."""
    shape = shapes.shape(spec, space) if shapes is not None else _build_shape(spec, space)
    return SchedulingJob(
        name=name,
        queue=spec.queue,
        priority=priority,
        preemptible=preemptible,
        submit_time=submit_time,
        sequence=sequence,
        tasks=shape.tasks,
        total=shape.total,
        affinity=spec.affinity,
        tolerations=shape.tolerations,
        gang=spec.gang,
        job_type=spec.type,
        labels=shape.labels,
        annotations=shape.annotations,
        user=spec.user if spec.user is not None else owner,
        expected_runtime=spec.duration if spec.duration is not None else spec.max_runtime,
        placement_key=shape.key if spec.topology is None else _with_topology(shape.key, spec),
        topology=spec.topology,
        min_runtime=spec.min_runtime,
        checkpoint_every=spec.checkpoint_every,
    )


GANG_TASK_SEPARATOR = "/"
"""Separates member job and task in a gang's combined task names (job names cannot hold it)."""


def combine_gang(name: str, members: list[SchedulingJob]) -> SchedulingJob:
    """One job standing for a named gang's queued members, so the gang is admitted and
    placed all at once, on one cluster.

    Its tasks are the members' tasks, named ``member/task`` (``GANG_TASK_SEPARATOR``), in
    submission order. It has the highest priority of its members, is preemptible only if every
    member is, and takes its queue, submission time, affinity and tolerations from the first
    member. When it is placed, the engine splits its assignment back into one per member by
    that prefix (``_Loop._commit`` in ``scheduler/algorithm.py``).
    """
    first = min(members, key=lambda job: job.sequence)
    tasks = tuple(
        TaskRequest(
            name=f"{member.name}{GANG_TASK_SEPARATOR}{task.name}",
            replicas=task.replicas,
            request=task.request,
            gpu=task.gpu,
            gpu_memory=task.gpu_memory,
            gpu_scope=task.gpu_scope,
            share_gpu=task.share_gpu,
            resources=task.resources,
        )
        for member in sorted(members, key=lambda job: job.sequence)
        for task in member.tasks
    )
    total = sum((member.total for member in members[1:]), start=members[0].total.copy())
    total.flags.writeable = False
    return SchedulingJob(
        name=name,
        queue=first.queue,
        priority=max(member.priority for member in members),
        preemptible=all(member.preemptible for member in members),
        submit_time=first.submit_time,
        sequence=first.sequence,
        tasks=tasks,
        total=total,
        affinity=first.affinity,
        tolerations=first.tolerations,
        gang=first.gang,
        job_type=first.job_type,
        user=first.user,
        topology=first.topology,
        min_runtime=max((m.min_runtime for m in members if m.min_runtime), default=None),
        checkpoint_every=first.checkpoint_every,
        expected_runtime=max(
            (m.expected_runtime for m in members if m.expected_runtime is not None), default=None
        ),
        placement_key=("gang", name, *(member.placement_key for member in members)),
    )


def remaining_replicas(job: SchedulingJob, placed: dict[str, int]) -> SchedulingJob | None:
    """The replicas of ``job`` not yet placed (a non-strict gang growing), or ``None``."""
    tasks = []
    for task in job.tasks:
        missing = task.replicas - placed.get(task.name, 0)
        if missing > 0:
            tasks.append(
                TaskRequest(
                    name=task.name,
                    replicas=missing,
                    request=task.request,
                    gpu=task.gpu,
                    gpu_memory=task.gpu_memory,
                    gpu_scope=task.gpu_scope,
                    share_gpu=task.share_gpu,
                    resources=task.resources,
                )
            )
    if not tasks:
        return None
    total = sum(
        (t.request * t.replicas for t in tasks[1:]), start=tasks[0].request * tasks[0].replicas
    )
    total.flags.writeable = False
    return replace(job, tasks=tuple(tasks), total=total, placement_key=("rest", job.name))
