"""What a cluster's backend reports about one node, and the nodes of a node group spec.

In the model layer, below both the backends (which report nodes) and the engine (whose
``NodeTable`` is built from them), so neither imports the other for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from flotilla.model.cluster import GpuTopology, NodeGroup, Taint


@dataclass(frozen=True)
class NodeInfo:
    """The static description of one node (what does not change while it runs jobs)."""

    name: str
    capacity: Mapping[str, float]
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    gpu_count: int = 0
    gpu_memory: float | None = None
    numa_nodes: int = 1
    pcie_switches: int | None = None
    gpu_model: str | None = None
    gpu_topology: GpuTopology | None = None
    """As discovered (``local/gpu_inventory.py``): shown and kept, not read by placement."""


def node_infos(group: NodeGroup) -> list[NodeInfo]:
    """The nodes of a node group spec (``count`` expanded), as a backend would report them."""
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
