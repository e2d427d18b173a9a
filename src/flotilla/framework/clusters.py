"""Clusters as the scheduler sees them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from flotilla.framework.nodes import NodeTable
from flotilla.framework.resources import Vector
from flotilla.model.cluster import GpuSharing


class ClusterState(StrEnum):
    READY = "ready"
    CORDONED = "cordoned"
    UNREACHABLE = "unreachable"


@dataclass(eq=False)
class Cluster:
    """A named set of nodes run by one backend. ``order`` is its declaration order."""

    name: str
    order: int
    labels: Mapping[str, str]
    cost: Mapping[str, float]
    nodes: NodeTable
    state: ClusterState = ClusterState.READY
    backend: str = "sim"
    grows: bool = True
    """Whether its backend can add replicas to a running run: the engine grows a non-strict
    gang that started here only if it can (the simulator's clusters all can)."""
    whole_gpus: bool = False
    """Whether its backend hands out whole GPU devices only (Kubernetes' ``nvidia.com/gpu``):
    a task asking for a share of one cannot go there (``plugins/devices.py``)."""
    gpu_sharing: GpuSharing = GpuSharing.SHARED
    """How fractions of different jobs may share a device (``plugins/devices.py``)."""
    topology: tuple[str, ...] = ()
    """Node-label keys of its network levels, widest first (``scheduler/topology.py``)."""

    @property
    def ready(self) -> bool:
        return self.state is ClusterState.READY

    def total_capacity(self) -> Vector:
        total: Vector = self.nodes.capacity.sum(axis=0)
        return total

    def snapshot(self) -> Cluster:
        """A copy whose node allocations may be changed without touching this one."""
        return Cluster(
            name=self.name,
            order=self.order,
            labels=self.labels,
            cost=self.cost,
            nodes=self.nodes.copy(),
            state=self.state,
            backend=self.backend,
            grows=self.grows,
            whole_gpus=self.whole_gpus,
            gpu_sharing=self.gpu_sharing,
            topology=self.topology,
        )
