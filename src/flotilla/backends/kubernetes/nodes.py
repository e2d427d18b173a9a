"""The cluster's nodes as Flotilla sees them: Ready and schedulable Nodes, their allocatable
resources less what other tenants' running pods request."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping

from flotilla.backends.kubernetes import manifests as m
from flotilla.backends.kubernetes.api import ApiFailure, KubeApi
from flotilla.backends.kubernetes.status import node_info, usable
from flotilla.model.node_info import NodeInfo
from flotilla.model.quantity import parse_quantity

NODE_CACHE_SECONDS = 5.0
"""How long a node list is reused to check a dispatch's placements (inventory reads fresh)."""


class NodeReader:
    """Reads the nodes, cached for ``NODE_CACHE_SECONDS``. Thread-safe."""

    def __init__(self, api: KubeApi, gpu_resource: str, count_other_pods: bool) -> None:
        self.api = api
        self.gpu_resource = gpu_resource
        self.count_other_pods = count_other_pods
        self._lock = threading.Lock()
        self._nodes: tuple[float, list[NodeInfo]] = (0.0, [])

    def read(self, fresh: bool = False) -> list[NodeInfo]:
        with self._lock:
            taken, nodes = self._nodes
            if not fresh and nodes and time.monotonic() - taken < NODE_CACHE_SECONDS:
                return nodes
        listed = [node for node in self.api.list_nodes()["items"] if usable(node)]
        used = self._used_by_others() if self.count_other_pods else {}
        infos = []
        for node in listed:
            info = node_info(node, self.gpu_resource)
            taken_here = used.get(info.name)
            if taken_here:
                capacity = {
                    key: max(0.0, amount - taken_here.get(key, 0.0))
                    for key, amount in info.capacity.items()
                }
                info = dataclasses.replace(info, capacity=capacity)
            infos.append(info)
        with self._lock:
            self._nodes = (time.monotonic(), infos)
        return infos

    def _used_by_others(self) -> dict[str, dict[str, float]]:
        """cpu/memory requested per node by running pods Flotilla did not start (other tenants),
        which Flotilla must not count as free."""
        used: dict[str, dict[str, float]] = {}
        try:
            pods = self.api.list_all_pods()["items"]
        except ApiFailure:
            return used  # no cluster-wide read access: count allocatable only (see docs)
        for pod in pods:
            node = pod.get("spec", {}).get("nodeName")
            labels = pod["metadata"].get("labels", {})
            if (
                not node
                or labels.get(m.MANAGED_BY) == "flotilla"
                or pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
            ):
                continue
            here = used.setdefault(node, {})
            for container in pod["spec"].get("containers", []):
                requests: Mapping[str, str] = container.get("resources", {}).get("requests", {})
                for key in ("cpu", "memory"):
                    if key in requests:
                        here[key] = here.get(key, 0.0) + parse_quantity(requests[key])
        return used
