"""This machine's GPUs as the local node's inventory: discovered through NVML, or as told.

``discover_gpus`` decides once, at start: a count given to the backend (the fleet file's
``gpus``) or in ``FLOTILLA_LOCAL_GPUS`` wins and is taken as is (a count, no memory or model:
the way to hide GPUs from Flotilla, or to run on a machine NVML cannot read); otherwise the
devices NVML reports (``gpu_sources.py``), with their memory, model, NUMA nodes and links (a
GPU in MIG mode: its MIG instances, each a device with its own memory); no NVML means no
GPUs. Either way ``notice`` says in one line what was found and how, and
``flotilla up`` shows it.

The inventory feeds placement through ``NodeInfo``: ``gpu_memory`` per device (so a
``gpu_memory: 10Gi`` job can be placed, and refused at submit only when no device could hold
it), ``numa_nodes`` when the devices' NUMA nodes form equal contiguous blocks of ids (the only
shape the device model expresses; any other leaves one group), and the labels NVIDIA's GPU
feature discovery puts on Kubernetes nodes (``nvidia.com/gpu.product``, ``…gpu.memory`` in
MiB, ``…gpu.count``), so an affinity written for a Kubernetes fleet selects the same machines.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from flotilla.backends.local.gpu_sources import GpuDevice, GpuSource, GpuUnavailable, NvmlSource
from flotilla.model.cluster import GpuInterconnect, GpuInventory, GpuTopology
from flotilla.model.node_info import NodeInfo
from flotilla.model.quantity import format_quantity

GPU_ENV = "FLOTILLA_LOCAL_GPUS"
MIB = 1024**2


@dataclass(frozen=True)
class Discovery:
    """What was found: ``inventory`` None when the node has no GPU; ``notice`` one line."""

    inventory: GpuInventory | None
    labels: Mapping[str, str]
    notice: str
    source: GpuSource | None = None
    """Where the devices were read from, for telemetry (None: told a count, or none found)."""
    devices: tuple[GpuDevice, ...] = ()
    """The devices found, by Flotilla's index (their UUIDs name them to CUDA)."""


def _override(gpus: int | None, environ: Mapping[str, str]) -> tuple[int, str] | None:
    if gpus is not None:
        return gpus, "the backend's gpus setting"
    given = environ.get(GPU_ENV, "").strip()
    if not given:
        return None
    try:
        count = int(given)
    except ValueError:
        raise ValueError(f"{GPU_ENV}: expected a whole number of GPUs, got {given!r}") from None
    if count < 0:
        raise ValueError(f"{GPU_ENV}: expected a whole number of GPUs, got {given!r}")
    return count, GPU_ENV


def discover_gpus(
    gpus: int | None = None,
    source: GpuSource | None = None,
    environ: Mapping[str, str] | None = None,
) -> Discovery:
    """The local node's GPUs: ``gpus`` or ``FLOTILLA_LOCAL_GPUS`` if given, else ``source``
    (NVML by default). Never raises for a machine without GPUs: that is an empty inventory."""
    told = _override(gpus, os.environ if environ is None else environ)
    if told is not None:
        count, where = told
        inventory = GpuInventory(count=count) if count else None
        return Discovery(inventory, {}, f"GPUs: {count} from {where} (no discovery)")
    source = source or NvmlSource()
    try:
        devices = source.devices()
    except GpuUnavailable as error:
        source.close()
        return Discovery(None, {}, f"GPUs: none ({error})")
    if not devices:
        source.close()
        return Discovery(None, {}, "GPUs: none (NVML reports no device, or no MIG instance)")
    inventory = inventory_of(devices)
    notice = f"GPUs: {describe(inventory)}{_mig_note(devices)} (NVML)"
    return Discovery(inventory, gpu_labels(inventory), notice, source, tuple(devices))


def _mig_note(devices: Sequence[GpuDevice]) -> str:
    """``, MIG instances of 1 GPU`` when some devices are MIG instances."""
    parents = {device.mig_parent for device in devices if device.mig_parent is not None}
    if not parents:
        return ""
    return f", MIG instances of {len(parents)} GPU{'s' if len(parents) > 1 else ''}"


def inventory_of(devices: Sequence[GpuDevice]) -> GpuInventory:
    """Devices as a node's ``gpus``: the smallest device's memory (what any one of them holds;
    MIG instances of different sizes count at the smallest's), the model (``A + B`` when they
    differ), NUMA blocks and links."""
    models = sorted({device.model for device in devices})
    numa = [device.numa_node for device in devices]
    links = [
        [
            ("X" if peer == device.index else device.links.get(peer, ""))
            for peer in range(len(devices))
        ]
        for device in devices
    ]
    return GpuInventory(
        count=len(devices),
        memory=float(min(device.memory_total for device in devices)),
        model=" + ".join(models),
        numa_nodes=numa_blocks(numa),
        topology=GpuTopology(interconnect=_interconnect(links), numa=numa, links=links),
    )


def numa_blocks(numa: Sequence[int | None]) -> int:
    """How many equal contiguous blocks of ids the devices' NUMA nodes form (1 otherwise:
    unknown, all on one node, or interleaved — the device model has no other shape)."""
    if not numa or any(node is None for node in numa):
        return 1
    blocks: list[int | None] = []
    for node in numa:
        if not blocks or blocks[-1] != node:
            if node in blocks:
                return 1  # a NUMA node's devices are not contiguous
            blocks.append(node)
    if len(numa) % len(blocks):
        return 1
    size = len(numa) // len(blocks)
    if any(numa[i * size : (i + 1) * size].count(node) != size for i, node in enumerate(blocks)):
        return 1
    return len(blocks)


def _interconnect(links: list[list[str]]) -> GpuInterconnect:
    pairs = [cell for row in links for cell in row if cell != "X"]
    nvlink = [cell.startswith("NV") for cell in pairs]
    if pairs and all(nvlink):
        return GpuInterconnect.NVLINK
    if any(nvlink):
        return GpuInterconnect.PARTIAL_NVLINK
    return GpuInterconnect.PCIE


def visible_devices(devices: Sequence[GpuDevice], gpu_ids: Sequence[int]) -> dict[str, str]:
    """``CUDA_VISIBLE_DEVICES`` for a replica given ``gpu_ids``: the devices' UUIDs (``GPU-…``,
    ``MIG-…``), which CUDA takes as they are, where NVML's indices may follow another order than
    CUDA's (``CUDA_DEVICE_ORDER`` defaults to fastest first on a node of mixed GPUs)."""
    if not gpu_ids or not devices:
        return {}
    return {"CUDA_VISIBLE_DEVICES": ",".join(devices[index].uuid for index in gpu_ids)}


def gpu_labels(inventory: GpuInventory) -> dict[str, str]:
    """The labels NVIDIA's GPU feature discovery sets on a Kubernetes node, for this one."""
    labels = {"nvidia.com/gpu.count": str(inventory.count)}
    if inventory.model:
        labels["nvidia.com/gpu.product"] = inventory.model.replace(" ", "-")
    if inventory.memory is not None:
        labels["nvidia.com/gpu.memory"] = str(int(inventory.memory // MIB))
    return labels


def describe(inventory: GpuInventory) -> str:
    """``8 × NVIDIA A100-SXM4-80GB, 80Gi each, nvlink, 2 NUMA nodes``."""
    parts = [f"{inventory.count} × {inventory.model or 'GPU'}"]
    if inventory.memory is not None:
        parts.append(f"{format_quantity('gpu_memory', inventory.memory)} each")
    if inventory.topology is not None and inventory.count > 1:
        parts.append(inventory.topology.interconnect.value)
    if inventory.numa_nodes > 1:
        parts.append(f"{inventory.numa_nodes} NUMA nodes")
    return ", ".join(parts)


def with_gpus(node: NodeInfo, discovery: Discovery) -> NodeInfo:
    """``node`` holding the discovered GPUs: the ``gpu`` (and ``gpu_memory``) capacity,
    the devices, their topology, and the labels."""
    inventory = discovery.inventory
    count = inventory.count if inventory else 0
    capacity = {**node.capacity, "gpu": float(count)}
    if inventory is not None and inventory.memory is not None:
        capacity["gpu_memory"] = inventory.memory * count
    return dataclasses.replace(
        node,
        capacity=capacity,
        labels={**node.labels, **discovery.labels},
        gpu_count=count,
        gpu_memory=inventory.memory if inventory else None,
        numa_nodes=inventory.numa_nodes if inventory else 1,
        gpu_model=inventory.model if inventory else None,
        gpu_topology=inventory.topology if inventory else None,
    )
