"""Engine clusters from cluster specs: one ``NodeTable`` per cluster."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from flotilla.framework.clusters import Cluster
from flotilla.framework.nodes import NodeInfo, NodeTable
from flotilla.framework.resources import ResourceSpace
from flotilla.model.cluster import ClusterSpec, NodeGroup
from flotilla.model.job import JobSpec


def node_infos(group: NodeGroup) -> list[NodeInfo]:
    capacity = dict(group.resources)
    gpu_count = group.gpus.count if group.gpus else int(capacity.get("gpu", 0))
    capacity["gpu"] = float(gpu_count)
    gpu_memory = group.gpus.memory if group.gpus else None
    if gpu_memory is not None:
        capacity.setdefault("gpu_memory", gpu_memory * gpu_count)
    return [
        NodeInfo(
            name=name,
            capacity=capacity,
            labels=dict(group.labels),
            taints=tuple(group.taints),
            gpu_count=gpu_count,
            gpu_memory=gpu_memory,
            numa_nodes=group.gpus.numa_nodes if group.gpus else 1,
            pcie_switches=group.gpus.pcie_switches if group.gpus else None,
            gpu_model=group.gpus.model if group.gpus else None,
            gpu_topology=group.gpus.topology if group.gpus else None,
        )
        for name in group.node_names()
    ]


def build_cluster(spec: ClusterSpec, order: int, space: ResourceSpace) -> Cluster:
    infos = [info for group in spec.nodes for info in node_infos(group)]
    return Cluster(
        name=spec.name,
        order=order,
        labels=dict(spec.labels),
        cost=dict(spec.cost),
        nodes=NodeTable(space, infos),
        backend=spec.backend,
        gpu_sharing=spec.gpu_sharing,
    )


def resource_space_for(
    clusters: Sequence[ClusterSpec], jobs: Iterable[JobSpec], extra: Iterable[str] = ()
) -> ResourceSpace:
    """Every resource named by a node or a job (and ``extra``, e.g. quota resources), plus
    ``gpu_memory`` when GPUs carry memory."""
    names: set[str] = set(extra)
    for cluster in clusters:
        for group in cluster.nodes:
            names.update(group.resources)
            if group.gpus is not None and group.gpus.memory is not None:
                names.add("gpu_memory")
    for job in jobs:
        for task in job.tasks:
            names.update(task.resources)
    return ResourceSpace(names)
