"""Capacity and allocation gauges per cluster and per node, for each resource.

Capacity comes from the clusters' node specs in the store (an unreachable cluster counts
none); allocation from the active jobs' runs: each placement holds its task's request on its
node. Label sets are bounded by the fleet: clusters, the resources they declare, and nodes —
node gauges only while the fleet has at most ``NODE_SERIES_LIMIT`` nodes (past that, the
per-cluster gauges alone). Series of clusters, nodes or resources that went away are removed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from prometheus_client import Gauge

from flotilla.framework.assignment_record import AssignmentRecord
from flotilla.jobdb import ReadTxn
from flotilla.model import ClusterSpec
from flotilla.service.metrics import SchedulerMetrics
from flotilla.store import ACTIVE_JOB_STATES, Store

NODE_SERIES_LIMIT = 1000
"""Most nodes for which per-node gauges are published (each node × resource is a series)."""

Amounts = dict[str, float]
Key = tuple[str, ...]


def _add(into: Amounts, amounts: Mapping[str, float], times: float = 1.0) -> None:
    for name, amount in amounts.items():
        into[name] = into.get(name, 0.0) + float(amount) * times


def node_capacity(resources: Mapping[str, float], gpu_devices: int | None) -> Amounts:
    """A node's resources, with its GPU devices counted as ``gpu`` when not listed."""
    capacity = {name: float(amount) for name, amount in resources.items()}
    if gpu_devices and "gpu" not in capacity:
        capacity["gpu"] = float(gpu_devices)
    return capacity


class CapacityGauges:
    def __init__(self, metrics: SchedulerMetrics) -> None:
        self._metrics = metrics
        self._cluster_series: set[Key] = set()
        self._node_series: set[Key] = set()

    def publish(
        self, store: Store, read: ReadTxn, pace: Callable[[], None] = lambda: None
    ) -> dict[str, Amounts]:
        """Set every gauge; returns each ready cluster's capacity (for the fleet's shares).
        ``pace`` is called between the active jobs walked (``Precedence.pace``)."""
        capacity: dict[str, Amounts] = {}
        node_count = 0
        for record in store.list_clusters():
            if record.state == "unreachable" or not record.spec.get("nodes"):
                continue  # (no nodes: a fleet cluster whose backend never reported any)
            mine = capacity.setdefault(record.name, {})
            for group in ClusterSpec.model_validate(record.spec).nodes:
                count = group.count or 1
                node_count += count
                devices = group.gpus.count if group.gpus is not None else None
                _add(mine, node_capacity(group.resources, devices), count)
        held_by_cluster: dict[str, Amounts] = {}
        held_by_node: dict[tuple[str, str], Amounts] = {}
        for state in ACTIVE_JOB_STATES:
            for job in read.jobs_in_state(state):
                pace()
                if job.run is None:
                    continue
                requests = {task.name: task.resources for task in job.spec.tasks}
                cluster = job.run.cluster
                for placement in AssignmentRecord.unmarshal(job.run.assignment).placements:
                    request = requests.get(placement.task, {})
                    _add(held_by_cluster.setdefault(cluster, {}), request)
                    _add(held_by_node.setdefault((cluster, placement.node), {}), request)
        cluster_values: dict[Key, tuple[float, float]] = {}
        for cluster, amounts in capacity.items():
            held = held_by_cluster.get(cluster, {})
            for resource, amount in amounts.items():
                cluster_values[(cluster, resource)] = (amount, held.get(resource, 0.0))
        self._cluster_series = self._set(
            cluster_values,
            self._cluster_series,
            (self._metrics.cluster_capacity, self._metrics.cluster_allocated),
        )
        node_values: dict[Key, tuple[float, float]] = {}
        if node_count <= NODE_SERIES_LIMIT:
            for cluster in capacity:
                for node in store.list_nodes(cluster):
                    held = held_by_node.get((cluster, node.name), {})
                    devices = (node.spec.get("gpus") or {}).get("count")
                    for resource, amount in node_capacity(node.resources, devices).items():
                        node_values[(cluster, node.name, resource)] = (
                            amount,
                            held.get(resource, 0.0),
                        )
        self._node_series = self._set(
            node_values,
            self._node_series,
            (self._metrics.node_capacity, self._metrics.node_allocated),
        )
        return capacity

    @staticmethod
    def _set(
        values: Mapping[Key, tuple[float, float]], before: set[Key], gauges: tuple[Gauge, Gauge]
    ) -> set[Key]:
        capacity_gauge, allocated_gauge = gauges
        for key, (amount, held) in values.items():
            capacity_gauge.labels(*key).set(amount)
            allocated_gauge.labels(*key).set(held)
        for key in before - set(values):
            capacity_gauge.remove(*key)
            allocated_gauge.remove(*key)
        return set(values)
