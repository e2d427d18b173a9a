"""A Ray cluster's nodes as Flotilla nodes (``GET /api/v0/nodes`` of the dashboard)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flotilla.model.node_info import NodeInfo

RAY_NAMES = {"CPU": "cpu", "GPU": "gpu", "memory": "memory"}
"""Ray's resource names for the resources Flotilla names itself; other resources keep their
Ray name (custom resources), except Ray's internal ones."""

INTERNAL = ("object_store_memory",)
"""Ray resources that are not for jobs to ask for (besides every ``prefix:value`` resource,
such as ``node:<ip>`` and ``accelerator_type:<type>``)."""


@dataclass(frozen=True)
class RayNode:
    """One alive Ray node: its Flotilla description and the Ray node id that pins a job."""

    info: NodeInfo
    node_id: str


ACCELERATOR_LABEL = "ray.io/accelerator-type"


def accelerator_type(total: Mapping[str, Any], labels: Mapping[str, str]) -> str | None:
    """The node's GPU model as Ray knows it: its ``ray.io/accelerator-type`` label, else its
    one ``accelerator_type:<type>`` resource (``A100``, ``H100``)."""
    if labels.get(ACCELERATOR_LABEL):
        return labels[ACCELERATOR_LABEL]
    types = [key.split(":", 1)[1] for key in total if key.startswith("accelerator_type:")]
    return types[0] if len(types) == 1 else None


def read_nodes(listed: Sequence[Mapping[str, Any]]) -> list[RayNode]:
    """The alive nodes, named by their IP address (the name Ray's own tools show), or by
    ``<ip>-<node id prefix>`` where several nodes share an address (several raylets on one
    machine)."""
    alive = [node for node in listed if node.get("state") == "ALIVE" and node.get("node_id")]
    addresses = [str(node.get("node_ip") or node["node_id"]) for node in alive]
    nodes = []
    for node, address in zip(alive, addresses, strict=True):
        node_id = str(node["node_id"])
        name = address if addresses.count(address) == 1 else f"{address}-{node_id[:12]}"
        total = node.get("resources_total") or {}
        capacity: dict[str, float] = {"cpu": 0.0, "memory": 0.0, "gpu": 0.0}
        for resource, amount in total.items():
            if resource in INTERNAL or ":" in resource:
                continue
            capacity[RAY_NAMES.get(resource, resource)] = float(amount)
        labels = {str(key): str(value) for key, value in (node.get("labels") or {}).items()}
        labels.update(
            {
                "backend": "ray",
                "ray.io/node-ip": address,
                "ray.io/head": "true" if node.get("is_head_node") else "false",
            }
        )
        gpus = int(capacity["gpu"])
        nodes.append(
            RayNode(
                info=NodeInfo(
                    name=name,
                    capacity=capacity,
                    labels=labels,
                    taints=(),
                    gpu_count=gpus,
                    gpu_model=accelerator_type(total, labels) if gpus else None,
                ),
                node_id=node_id,
            )
        )
    return sorted(nodes, key=lambda node: node.info.name)
