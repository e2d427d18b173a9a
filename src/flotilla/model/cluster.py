"""Clusters, nodes, taints and GPU inventories."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator

from flotilla.model.base import MAX_COUNT, Labels, Name, Quantity, ResourceList, Seconds, Strict

MAX_NODES_PER_GROUP = 100_000
MAX_PRICE = 1e9
"""The largest price per unit-hour of a resource (a cost strategy sums them)."""


def check_costs(cost: dict[str, float]) -> None:
    """Prices are finite, non-negative and at most ``MAX_PRICE``."""
    for resource, price in cost.items():
        if price < 0:
            raise ValueError(f"cost.{resource}: must be >= 0")
        if not price <= MAX_PRICE:  # NaN too
            raise ValueError(f"cost.{resource}: must be at most {MAX_PRICE:g}")


SIMULATED_LABEL = "flotilla.io/simulated"
"""On a cluster whose runs are simulated (``"true"``): a candidate only for a job whose
required cluster affinity names one of its labels (``framework/interfaces.py``
``cluster_admits``; set by ``model/fleet.py`` ``Fleet.labels_of``)."""


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Taint(Strict):
    key: str = Field(min_length=1)
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


class GpuInterconnect(StrEnum):
    NVLINK = "nvlink"
    """Every pair of devices joined by NVLink (directly or through NVSwitch)."""
    PARTIAL_NVLINK = "partial-nvlink"
    """Some pairs by NVLink, the others over PCIe."""
    PCIE = "pcie"


class GpuTopology(Strict):
    """How a node's GPUs are joined, as discovery found them. Shown and kept; placement reads
    ``numa_nodes`` and ``pcie_switches``, which discovery derives from the same facts."""

    interconnect: GpuInterconnect = GpuInterconnect.PCIE
    numa: list[int | None] = Field(default=[], max_length=MAX_COUNT)
    """The NUMA node of each device, by id (``None``: unknown)."""
    links: list[list[str]] = Field(default=[], max_length=MAX_COUNT)
    """``nvidia-smi topo -m``'s matrix between devices: ``X`` (itself), ``NV<n>`` (NVLink),
    ``PIX``/``PXB`` (PCIe bridges), ``PHB`` (host bridge), ``NODE``, ``SYS`` (across NUMA)."""


class GpuInventory(Strict):
    """A node's GPUs: ids 0..count-1.

    NUMA node k (and PCIe switch k) holds the k-th contiguous block of ids.
    """

    count: int = Field(ge=0, le=MAX_COUNT)
    memory: Quantity | None = None
    """Per device (the smallest device's, when they differ)."""
    model: str | None = Field(default=None, max_length=256)
    """As the driver names it, e.g. ``NVIDIA H200``."""
    topology: GpuTopology | None = None
    numa_nodes: int = Field(default=1, ge=1, le=MAX_COUNT)
    pcie_switches: int | None = Field(default=None, ge=1, le=MAX_COUNT)

    @model_validator(mode="after")
    def _blocks_divide(self) -> GpuInventory:
        for field, groups in (
            ("numa_nodes", self.numa_nodes),
            ("pcie_switches", self.pcie_switches),
        ):
            if groups is not None and self.count and self.count % groups:
                raise ValueError(f"{field}: {groups} does not divide count {self.count}")
        return self


class NodeGroup(Strict):
    """One node, or with ``count`` N the nodes name-0 … name-(N-1), all alike."""

    name: Name
    count: int | None = Field(default=None, ge=1, le=MAX_NODES_PER_GROUP)
    resources: ResourceList
    labels: Labels = {}
    taints: list[Taint] = []
    gpus: GpuInventory | None = None

    @model_validator(mode="after")
    def _gpu_count_agrees(self) -> NodeGroup:
        declared = self.resources.get("gpu")
        if self.gpus is not None and declared is not None and declared != self.gpus.count:
            raise ValueError(
                f"resources.gpu ({declared:g}) and gpus.count ({self.gpus.count}) disagree"
            )
        if self.gpus is None and declared is not None and declared != int(declared):
            raise ValueError("resources.gpu: a node has a whole number of GPUs")
        return self

    def node_names(self) -> list[str]:
        if self.count is None:
            return [self.name]
        return [f"{self.name}-{index}" for index in range(self.count)]


class GpuSharing(StrEnum):
    """How fractional GPU requests (``gpu`` < 1) of different jobs may share a device."""

    SHARED = "shared"
    """Fractions share devices up to 1.0 of each; nothing limits a fraction's memory or
    compute (the default, and Flotilla's behaviour before the setting existed)."""
    NONE = "none"
    """A fraction gets a device to itself unless it and the others there opt in
    (``share_gpu: true`` on their tasks)."""
    EXCLUSIVE = "exclusive"
    """Every fraction gets a device to itself."""
    MONITOR = "monitor"
    """Fractions share devices as with ``shared``; the backend watches each run's GPU memory
    and stops, failed, one that holds more than its share (``gpu_memory``, else its ``gpu``
    fraction of the device's memory). Enforced by ``local`` (through NVML); elsewhere it
    places as ``shared``."""
    MPS = "mps"
    """Fractions share devices as with ``shared``; ``local`` runs them as clients of an NVIDIA
    MPS control daemon, each limited to its share's memory and SMs (``backends/local/gpu_mps.py``);
    elsewhere it places as ``shared``."""


def check_topology(levels: list[str]) -> None:
    """Topology levels are distinct label keys."""
    for level in levels:
        if not level:
            raise ValueError("topology: a level is a node-label key, not empty")
        if levels.count(level) > 1:
            raise ValueError(f"topology: level {level!r} is named twice")


class ClusterSpec(Strict):
    name: Name
    labels: Labels = {}
    gpu_sharing: GpuSharing = GpuSharing.SHARED
    cost: dict[str, float] = {}
    """Price per unit-hour by resource (``cpu``, ``memory_gib``, ``gpu``, …)."""
    backend: str = "sim"
    startup_delay: Seconds = 0
    fail_at: Seconds | None = None
    nodes: list[NodeGroup] = Field(min_length=1)
    topology: list[str] = []
    """Extension: node-label keys naming the cluster's network levels, widest first (e.g.
    ``[block, rack, host]``): a job's ``topology`` asks for one domain of a level."""

    @model_validator(mode="after")
    def _costs_in_range(self) -> ClusterSpec:
        check_costs(self.cost)
        check_topology(self.topology)
        return self
