"""Clusters as the scheduler sees them, and the ``ClustersCache`` that hands them out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from flotilla.framework.nodes import NodeTable
from flotilla.framework.resources import Vector


class ClusterState(StrEnum):
    READY = "ready"
    CORDONED = "cordoned"
    UNREACHABLE = "unreachable"


class ClusterFilter(StrEnum):
    READY = "ready"
    ALL = "all"


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
        )


class ClustersCache(Protocol):
    """Registered clusters (Michelangelo's RegisteredClustersCache).

    ``get_clusters`` returns clusters in declaration order; ``get_cluster`` returns ``None``
    for an unknown name. Neither raises.
    """

    def get_clusters(
        self, cluster_filter: ClusterFilter = ClusterFilter.READY
    ) -> list[Cluster]: ...

    def get_cluster(self, name: str) -> Cluster | None: ...


class StaticClustersCache:
    """A ``ClustersCache`` over a fixed list (the simulator's, and a scheduling snapshot's)."""

    def __init__(self, clusters: Sequence[Cluster]) -> None:
        self._clusters = sorted(clusters, key=lambda cluster: cluster.order)
        self._by_name = {cluster.name: cluster for cluster in self._clusters}

    def get_clusters(self, cluster_filter: ClusterFilter = ClusterFilter.READY) -> list[Cluster]:
        if cluster_filter is ClusterFilter.ALL:
            return list(self._clusters)
        return [cluster for cluster in self._clusters if cluster.ready]

    def get_cluster(self, name: str) -> Cluster | None:
        return self._by_name.get(name)
