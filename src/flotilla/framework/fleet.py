"""Engine clusters from cluster specs: one ``NodeTable`` per cluster."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from flotilla.framework.clusters import Cluster
from flotilla.framework.nodes import NodeTable
from flotilla.framework.resources import ResourceSpace
from flotilla.model.cluster import ClusterSpec
from flotilla.model.job import JobSpec
from flotilla.model.node_info import node_infos

__all__ = ["build_cluster", "resource_space_for"]


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
        topology=tuple(spec.topology),
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
