"""Refusing at submission a job that no cluster of the fleet could ever hold (Slurm does).

The fleet is what the scheduler places on: the clusters in the store and the nodes their
backends reported (a cluster with no nodes yet does not count; with none at all nothing is
refused). Every check is a necessary condition for a placement on an empty cluster, so a job
that is refused could never start, whatever else runs; a job that passes may still wait.
Taints are not looked at (they can only make a placement harder), nor are gangs spanning
several jobs. ``hold_if_unfit: true`` keeps such a job queued, for a fleet that will grow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flotilla.backends import available_backends, backend_can_grow, backend_shares_gpus
from flotilla.lifecycle import gangs
from flotilla.model import GangMode, JobSpec, TaskSpec, format_quantity
from flotilla.model.cluster import SIMULATED_LABEL
from flotilla.store import ClusterRecord

EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class NodeShape:
    """Identical nodes of one cluster: their capacity, labels and how many there are.
    ``device_memory``: the memory of each GPU (infinite when not known, as placement takes it)."""

    capacity: Mapping[str, float]
    labels: Mapping[str, str]
    count: int
    device_memory: float = math.inf


@dataclass(frozen=True, slots=True)
class ClusterShape:
    name: str
    labels: Mapping[str, str]
    nodes: tuple[NodeShape, ...]


def _node_shape(group: Mapping[str, Any]) -> NodeShape:
    capacity = {name: float(amount) for name, amount in group.get("resources", {}).items()}
    gpus = group.get("gpus") or {}
    count = gpus.get("count") or 0
    device_memory = math.inf if gpus.get("memory") is None else float(gpus["memory"])
    if "gpu" not in capacity and count:
        capacity["gpu"] = float(count)
    if "gpu_memory" not in capacity and count and gpus.get("memory") is not None:
        # The devices' memory together, as the scheduler's resources see it (a node whose
        # GPU memory is not known offers none there: a count from FLOTILLA_LOCAL_GPUS).
        capacity["gpu_memory"] = device_memory * count
    labels = dict(group.get("labels") or {})
    return NodeShape(capacity, labels, int(group.get("count") or 1), device_memory)


def _merged(shapes: Sequence[NodeShape]) -> tuple[NodeShape, ...]:
    """Identical nodes as one shape with their total count: a cluster its backend reported
    node by node is checked once per kind of node, not once per node, for every job."""
    counts: dict[tuple[Any, ...], NodeShape] = {}
    for shape in shapes:
        key = (
            tuple(sorted(shape.capacity.items())),
            tuple(sorted(shape.labels.items())),
            shape.device_memory,
        )
        held = counts.get(key)
        counts[key] = (
            shape
            if held is None
            else NodeShape(held.capacity, held.labels, held.count + shape.count, held.device_memory)
        )
    return tuple(counts.values())


def fleet_shapes(records: Sequence[ClusterRecord]) -> list[ClusterShape]:
    """The clusters that have nodes, as the store keeps them (``spec.nodes``)."""
    return [
        ClusterShape(
            record.name,
            dict(record.labels),
            _merged([_node_shape(group) for group in record.spec.get("nodes") or ()]),
        )
        for record in records
        if record.spec.get("nodes")
    ]


def _has(labels: Mapping[str, str], required: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in required.items())


def _shown(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{key}={value}" for key, value in sorted(labels.items()))


def _amount(resource: str, value: float) -> str:
    return f"{resource}={format_quantity(resource, value)}"


def _device_memory_needed(task: TaskSpec) -> float:
    """The GPU memory one device must have for the task: a fraction's whole ``gpu_memory``
    on its one device, whole GPUs' shared equally (as ``plugins/devices.py`` places them)."""
    gpu = task.resources.get("gpu", 0.0)
    memory = task.resources.get("gpu_memory", 0.0)
    if gpu <= 0 or memory <= 0:
        return 0.0
    return memory if gpu < 1 else memory / gpu


def _per_node(task: TaskSpec, node: NodeShape) -> float:
    """How many replicas of ``task`` one empty node of this shape holds."""
    if _device_memory_needed(task) > node.device_memory + EPSILON:
        return 0.0
    most = math.inf
    for resource, amount in task.resources.items():
        if amount > 0:
            most = min(most, math.floor(node.capacity.get(resource, 0.0) / amount + EPSILON))
    return most


def _fits_cluster(spec: JobSpec, nodes: Sequence[NodeShape]) -> bool:
    """Whether an empty cluster of these (eligible) nodes could hold every replica."""
    for task in spec.tasks:
        if sum(node.count * _per_node(task, node) for node in nodes) < task.replicas:
            return False
    total: dict[str, float] = {}
    for task in spec.tasks:
        for resource, amount in task.resources.items():
            total[resource] = total.get(resource, 0.0) + amount * task.replicas
    for resource, amount in total.items():
        have = sum(node.count * node.capacity.get(resource, 0.0) for node in nodes)
        if amount > have + EPSILON:
            return False
    return True


def unfit_problems(spec: JobSpec, clusters: Sequence[ClusterShape]) -> list[str]:
    """Why ``spec`` can never fit any of ``clusters``, one line per field; empty when it
    may, when the submitter asked to hold it, or when the fleet has no nodes yet."""
    if spec.hold_if_unfit or not clusters:
        return []
    wanted_clusters = spec.affinity.clusters.required
    candidates = [cluster for cluster in clusters if _has(cluster.labels, wanted_clusters)]
    if not candidates:
        return [
            f"affinity.clusters.required: no cluster of the fleet has {_shown(wanted_clusters)}"
        ]
    if wanted_clusters:
        return _unfit_on(spec, candidates)
    # Simulated clusters take only the jobs that ask for them (``cluster_admits``).
    real = [c for c in candidates if c.labels.get(SIMULATED_LABEL) != "true"]
    problems = _unfit_on(spec, real if real else candidates)
    if (problems or not real) and len(real) < len(candidates) and not _unfit_on(spec, candidates):
        return [
            "affinity.clusters.required: every cluster of the fleet that could take it is "
            f"simulated ({SIMULATED_LABEL}): its runs would not execute; require one of "
            "its labels to send it there"
        ]
    return problems


def _unfit_on(spec: JobSpec, candidates: Sequence[ClusterShape]) -> list[str]:
    """Why ``spec`` can never fit any of ``candidates`` (clusters it may go to)."""
    wanted_clusters = spec.affinity.clusters.required
    wanted_nodes = spec.affinity.nodes.required
    eligible = {
        cluster.name: [node for node in cluster.nodes if _has(node.labels, wanted_nodes)]
        for cluster in candidates
    }
    nodes = [node for found in eligible.values() for node in found]
    if not nodes:
        return [f"affinity.nodes.required: no node of the fleet has {_shown(wanted_nodes)}"]
    where = "node of the fleet" + (
        " matching the job's affinity" if wanted_nodes or wanted_clusters else ""
    )
    problems: list[str] = []
    for index, task in enumerate(spec.tasks):
        too_big = False
        for resource, amount in task.resources.items():
            largest = max(node.capacity.get(resource, 0.0) for node in nodes)
            if amount > largest + EPSILON:
                too_big = True
                problems.append(
                    f"tasks[{index}].resources.{resource}: {format_quantity(resource, amount)} per "
                    f"replica, but the largest {where} has {format_quantity(resource, largest)}"
                )
        per_device = _device_memory_needed(task)
        largest_device = max(
            (node.device_memory for node in nodes if node.capacity.get("gpu", 0.0) > 0),
            default=0.0,
        )
        if not too_big and per_device > largest_device + EPSILON:
            too_big = True
            problems.append(
                f"tasks[{index}].resources.gpu_memory: "
                f"{format_quantity('gpu_memory', per_device)} on one GPU, but the largest GPU "
                f"of any {where} has {format_quantity('gpu_memory', largest_device)}"
            )
        if not too_big and not any(_per_node(task, node) >= 1 for node in nodes):
            asked = ", ".join(_amount(name, value) for name, value in task.resources.items())
            problems.append(f"tasks[{index}].resources: no {where} has {asked} at once")
    if problems or (spec.gang is not None and spec.gang.mode is GangMode.NON_STRICT):
        return problems  # a non-strict gang may start with fewer members
    if not any(_fits_cluster(spec, found) for found in eligible.values()):
        replicas = sum(task.replicas for task in spec.tasks)
        field = "tasks[0].replicas" if len(spec.tasks) == 1 else "tasks"
        return [
            f"{field}: the job's {replicas} replicas run together on one cluster, and no "
            "cluster of the fleet can hold them all even when empty"
        ]
    return []


def whole_gpu_problems(spec: JobSpec, records: Sequence[ClusterRecord]) -> list[str]:
    """Why a task asking for a share of a GPU (``gpu: 0.5``) could never run here: every
    cluster it may go to (its ``affinity.clusters.required``) that has GPUs runs a backend
    that hands out whole devices only (Kubernetes). Empty otherwise, or for a fleet with no
    GPU cluster yet (the fit check speaks then)."""
    shares = [
        (index, task.resources.get("gpu", 0.0))
        for index, task in enumerate(spec.tasks)
        if abs(task.resources.get("gpu", 0.0) - round(task.resources.get("gpu", 0.0))) > EPSILON
    ]
    if not shares or not records:
        return []
    wanted = spec.affinity.clusters.required
    with_gpus = [
        record
        for record in records
        if _has(record.labels, wanted)
        and any(group.get("gpus") for group in record.spec.get("nodes") or ())
    ]
    if not with_gpus or any(backend_shares_gpus(record.backend) for record in with_gpus):
        return []
    engines = ", ".join(f"{record.name} ({record.backend})" for record in with_gpus)
    return [
        f"tasks[{index}].resources.gpu: {gpu:g} is a share of a device, and every cluster it "
        f"may run on with GPUs hands out whole devices only: {engines}. Ask for whole GPUs, "
        "or require a cluster whose backend shares them"
        for index, gpu in shares
    ]


def growth_problems(spec: JobSpec, records: Sequence[ClusterRecord]) -> list[str]:
    """Why a non-strict gang that starts with fewer replicas than it asks for could never
    grow here: no cluster it may run on (its ``affinity.clusters.required``) has a backend
    that can add replicas to a running run. Empty when it may grow, or is no such gang."""
    if not gangs.may_grow(spec) or not records:
        return []
    wanted = spec.affinity.clusters.required
    candidates = [record for record in records if _has(record.labels, wanted)]
    if not candidates or any(backend_can_grow(record.backend) for record in candidates):
        return []
    assert spec.gang is not None
    growable = sorted(name for name in available_backends() if backend_can_grow(name))
    engines = ", ".join(f"{record.name} ({record.backend})" for record in candidates)
    return [
        f"gang.mode: non-strict starts with min_member {spec.gang.min_member} of the job's "
        f"{gangs.wanted_replicas(spec)} replicas and adds the rest as they fit, but no cluster "
        f"it may run on can add replicas to a running run: {engines}. Give mode: strict "
        "(every replica at once), or affinity.clusters.required naming a cluster whose backend "
        f"can ({', '.join(growable)})"
    ]
