"""Between the store's records and the engine's objects: jobs and clusters.

(An assignment's JSON form, stored on its run, is ``Assignment.to_json``/``from_json``:
``framework/assignment_record.py``.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from flotilla.backends import backend_can_grow, backend_shares_gpus
from flotilla.framework.clusters import Cluster, ClusterState
from flotilla.framework.fleet import build_cluster, resource_space_for
from flotilla.framework.jobs import SchedulingJob, ShapeInterner, build_job
from flotilla.framework.resources import ResourceSpace
from flotilla.model import ClusterSpec, GpuInventory, JobSpec, NodeGroup
from flotilla.model.node_info import NodeInfo
from flotilla.store import ClusterRecord, JobRecord


def space_for(clusters: Sequence[ClusterSpec], jobs: Sequence[JobSpec]) -> ResourceSpace:
    return resource_space_for(clusters, jobs)


def cluster_from_record(record: ClusterRecord, order: int, space: ResourceSpace) -> Cluster:
    spec = ClusterSpec.model_validate(record.spec)
    cluster = build_cluster(spec, order, space)
    cluster.state = ClusterState(record.state) if record.state in _STATES else ClusterState.READY
    cluster.grows = backend_can_grow(record.backend)
    cluster.whole_gpus = not backend_shares_gpus(record.backend)
    return cluster


_STATES = {state.value for state in ClusterState}


def job_from_record(
    record: JobRecord, space: ResourceSpace, shapes: ShapeInterner | None = None
) -> SchedulingJob:
    spec = record.spec
    return build_job(
        spec,
        name=record.id,
        space=space,
        sequence=record.submit_serial,
        submit_time=record.submitted_at.timestamp(),
        priority=record.priority,
        preemptible=spec.preemptible if spec.preemptible is not None else True,
        shapes=shapes,
        owner=record.owner,
    )


def unknown_resources(spec: JobSpec, space: ResourceSpace) -> list[str]:
    """Resources the job asks for that no node of any cluster offers."""
    return sorted({name for task in spec.tasks for name in task.resources} - set(space.names))


def cluster_spec_from_inventory(
    name: str, backend: str, nodes: Sequence[NodeInfo], labels: Mapping[str, str] | None = None
) -> ClusterSpec:
    """What a backend reports about its nodes, as the cluster spec the store keeps."""
    groups = []
    for node in nodes:
        resources = {k: v for k, v in node.capacity.items() if k not in ("gpu", "gpu_memory")}
        gpus = None
        if node.gpu_count:
            gpus = GpuInventory(
                count=node.gpu_count,
                memory=node.gpu_memory,
                numa_nodes=node.numa_nodes,
                pcie_switches=node.pcie_switches,
                model=node.gpu_model,
                topology=node.gpu_topology,
            )
        groups.append(
            NodeGroup(
                name=node.name,
                resources=resources,
                labels=dict(node.labels),
                taints=list(node.taints),
                gpus=gpus,
            )
        )
    return ClusterSpec(name=name, backend=backend, labels=dict(labels or {}), nodes=groups)
