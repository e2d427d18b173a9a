"""GPU devices: whole GPUs get whole free devices, fractions share one device up to 1.0.

Placement keeps the fleet unfragmented: a fraction goes to the partly used device with the
least share left that still fits, and whole GPUs come from the NUMA group (or PCIe switch)
with the fewest usable devices that can hold them, so idle devices and idle groups stay whole
for big requests. A task's ``topology.gpu`` scope (device, pcie, numa, node) keeps its GPUs
within one such unit.

A cluster's ``gpu_sharing`` says whether fractions of different jobs may meet on a device:
``shared`` (the default) packs them as above; ``exclusive`` gives every fraction a whole idle
device (it holds share 1.0 of it, so nothing joins it); ``none`` does so for a fraction whose
task did not opt in (``share_gpu: true``), while opted-in fractions share devices only with
each other (a device a non-opted fraction holds has no share left). Nothing here limits a
fraction's memory or compute on the device: that is the backend's part, not done yet.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from flotilla.framework.interfaces import FilterInput, ReserveInput, ReserveResult, Status
from flotilla.framework.jobs import TaskRequest
from flotilla.framework.nodes import GpuAllocation, Mask, NodeTable
from flotilla.framework.resources import EPSILON
from flotilla.model.cluster import GpuSharing
from flotilla.model.job import TopologyScope
from flotilla.model.quantity import format_quantity


def _blocks(nodes: NodeTable, scope: TopologyScope | None) -> npt.NDArray[np.int64] | None:
    if scope is TopologyScope.NUMA:
        return nodes.numa_block
    if scope is TopologyScope.PCIE:
        return nodes.pcie_block
    return None


def device_share(task: TaskRequest, sharing: GpuSharing) -> float:
    """The share of a device one of the task's GPUs holds: a whole device for whole GPUs,
    and for a fraction that may not meet other jobs there (see the module docstring)."""
    if task.gpu >= 1 or sharing is GpuSharing.EXCLUSIVE:
        return 1.0
    if sharing is GpuSharing.NONE and not task.share_gpu:
        return 1.0
    return task.gpu


def _usable_devices(
    task: TaskRequest,
    device_free: npt.NDArray[np.float64],
    device_memory_free: npt.NDArray[np.float64],
    need_share: float,
) -> Mask:
    """Devices (of the given rows) with ``need_share`` free and enough memory for one of the
    task's GPUs: a fraction on its own device, or one whole device per GPU."""
    gpu, memory = task.gpu, task.gpu_memory
    per_device_memory = memory if gpu < 1 else memory / gpu
    usable: Mask = (device_free >= need_share - EPSILON) & (
        device_memory_free >= per_device_memory - EPSILON
    )
    return usable


_NOTHING_RESERVED = ReserveResult()
"""What a task without GPUs reserves (one shared, immutable result)."""


def _is_share(gpu: float) -> bool:
    """A request for part of a device (0.5, 1.5), not whole devices."""
    return abs(gpu - round(gpu)) > EPSILON


class GpuDevices:
    name = "gpu-devices"
    # Row-local: a node's verdict reads only its own devices and their topology.

    def filter(self, request: FilterInput) -> Mask:
        nodes = request.cluster.nodes
        gpu = request.task.gpu
        if gpu <= 0:
            return nodes.everywhere
        rows = request.rows
        if request.cluster.whole_gpus and _is_share(gpu):
            return np.zeros(len(nodes) if rows is None else len(rows), dtype=bool)
        share = device_share(request.task, request.cluster.gpu_sharing)
        if rows is None:
            usable = _usable_devices(
                request.task, nodes.device_free, nodes.device_memory_free, share
            )
        else:
            usable = _usable_devices(
                request.task, nodes.device_free[rows], nodes.device_memory_free[rows], share
            )
        if gpu < 1:
            return np.asarray(usable.any(axis=1), dtype=bool)
        count = int(gpu)
        scope = request.task.gpu_scope
        if scope is TopologyScope.DEVICE:
            return np.asarray(usable.any(axis=1) & (count <= 1), dtype=bool)
        blocks = _blocks(nodes, scope)
        if blocks is None:
            return np.asarray(np.count_nonzero(usable, axis=1) >= count, dtype=bool)
        if rows is not None:
            # Blocks numbered past the rows' own have no device there: no verdict changes.
            blocks = blocks[rows]
        fits = np.zeros(len(usable), dtype=bool)
        for block in range(int(blocks.max(initial=-1)) + 1):
            fits |= np.count_nonzero(usable & (blocks == block), axis=1) >= count
        return fits

    def row_filter(self, request: FilterInput) -> Callable[[int], bool] | None:
        """One node's verdict on Python floats: the best-node index re-asks about a few
        changed rows this way, cheaper than numpy calls. The comparisons and counts are
        ``filter``'s, device by device, so the verdicts are the same. ``None`` when the task
        wants no GPU (every node passes)."""
        gpu = request.task.gpu
        if gpu <= 0:
            return None
        if request.cluster.whole_gpus and _is_share(gpu):
            return lambda _row: False
        nodes = request.cluster.nodes
        memory = request.task.gpu_memory
        need_share = device_share(request.task, request.cluster.gpu_sharing)
        per_device_memory = memory if gpu < 1 else memory / gpu
        share_floor = need_share - EPSILON
        memory_floor = per_device_memory - EPSILON
        device_free = nodes.device_free
        device_memory_free = nodes.device_memory_free

        def usable(row: int) -> list[bool]:
            return [
                share >= share_floor and left >= memory_floor
                for share, left in zip(
                    device_free[row].tolist(), device_memory_free[row].tolist(), strict=True
                )
            ]

        count = int(gpu)
        scope = request.task.gpu_scope
        if gpu < 1 or scope is TopologyScope.DEVICE:
            enough = gpu < 1 or count <= 1
            return lambda row: enough and any(usable(row))
        blocks = _blocks(nodes, scope)
        if blocks is None:
            return lambda row: sum(usable(row)) >= count
        grouping = blocks

        def fits(row: int) -> bool:
            per_block: dict[int, int] = {}
            for block, ok in zip(grouping[row].tolist(), usable(row), strict=True):
                if ok and block >= 0:
                    per_block[block] = per_block.get(block, 0) + 1
            return any(found >= count for found in per_block.values())

        return fits

    def explain(self, request: FilterInput, rejected: Mask) -> str | None:
        nodes = request.cluster.nodes
        gpu = request.task.gpu
        if request.cluster.whole_gpus and _is_share(gpu):
            return (
                f"gpu {gpu:g} is a share of a device, and this cluster's backend "
                f"({request.cluster.backend}) hands out whole devices only"
            )
        # Nodes short of GPUs in total are explained by resources-fit; say what is left:
        # enough GPU overall but not on suitable devices (fragmentation or topology).
        enough = (
            nodes.capacity[:, nodes.space.index["gpu"]]
            - nodes.allocated[:, nodes.space.index["gpu"]]
            >= gpu - EPSILON
        )
        count = int(np.count_nonzero(rejected & enough))
        if count == 0:
            return None
        memory = request.task.gpu_memory
        extra = f" and {format_quantity('gpu_memory', memory)} GPU memory" if memory else ""
        scope = request.task.gpu_scope
        if gpu < 1 and device_share(request.task, request.cluster.gpu_sharing) >= 1:
            sharing = request.cluster.gpu_sharing.value
            what = f"no idle GPU{extra} (gpu_sharing {sharing}: a fraction gets a GPU to itself)"
        elif gpu < 1:
            what = f"no single GPU with {gpu:g} of it free{extra}"
        elif scope in (TopologyScope.NUMA, TopologyScope.PCIE):
            what = f"no {scope.value} group with {int(gpu)} whole free GPUs{extra}"
        else:
            what = f"fewer than {int(gpu)} whole free GPUs{extra}"
        return f"{count} node{'s' if count != 1 else ''} with enough GPU in total but {what}"

    def reserve(self, request: ReserveInput) -> ReserveResult:
        gpu = request.task.gpu
        if gpu <= 0:
            return _NOTHING_RESERVED
        nodes = request.cluster.nodes
        row = request.row
        if gpu >= 1:
            # Whole GPUs: the filter's comparisons on the row's Python floats (a row of a
            # few devices is cheaper as a list than through numpy calls).
            memory_floor = request.task.gpu_memory / gpu - EPSILON
            share_floor = 1.0 - EPSILON
            usable_ids = [
                device
                for device, (share, left) in enumerate(
                    zip(
                        nodes.device_free[row].tolist(),
                        nodes.device_memory_free[row].tolist(),
                        strict=True,
                    )
                )
                if share >= share_floor and left >= memory_floor
            ]
            chosen = self._whole_devices(request, usable_ids, int(gpu))
            if chosen is None:
                return ReserveResult(Status.unschedulable("not enough whole GPUs left on the node"))
            shares: tuple[tuple[int, float], ...] = tuple((device, 1.0) for device in chosen)
            return ReserveResult(gpus=GpuAllocation(shares=shares, memory=request.task.gpu_memory))
        # The node's own devices only (the same comparisons as the filter's, on one row).
        share = device_share(request.task, request.cluster.gpu_sharing)
        usable = _usable_devices(
            request.task, nodes.device_free[row], nodes.device_memory_free[row], share
        )
        candidates = np.flatnonzero(usable)
        if len(candidates) == 0:
            return ReserveResult(Status.unschedulable("no GPU share left on the node"))
        free = nodes.device_free[row, candidates]
        # Least share left first; among equals, the device in the busiest NUMA group (numpy's
        # sums: a Python sum could round differently and pick another device).
        group_free = np.array(
            [
                nodes.device_free[row][nodes.numa_block[row] == nodes.numa_block[row, d]].sum()
                for d in candidates
            ]
        )
        device = int(candidates[np.lexsort((candidates, group_free, free))[0]])
        return ReserveResult(
            gpus=GpuAllocation(shares=((device, share),), memory=request.task.gpu_memory)
        )

    def _whole_devices(
        self, request: ReserveInput, candidates: list[int], count: int
    ) -> list[int] | None:
        """Devices from the groups with the fewest usable devices first (best fit)."""
        nodes = request.cluster.nodes
        row = request.row
        scope = request.task.gpu_scope
        if scope is TopologyScope.DEVICE and count > 1:
            return None
        blocks = _blocks(nodes, scope)
        grouping = blocks if blocks is not None else nodes.numa_block
        groups: list[int] = grouping[row].tolist()
        by_group: dict[int, list[int]] = {}
        for device in candidates:
            by_group.setdefault(groups[device], []).append(device)
        ordered = sorted(by_group.items(), key=lambda item: (len(item[1]), item[0]))
        if blocks is not None:
            for _, devices in ordered:
                if len(devices) >= count:
                    return devices[:count]
            return None
        # No scope: fill a group that holds the whole request if one does, else take from
        # the smallest groups first so the larger ones stay whole.
        for _, devices in ordered:
            if len(devices) >= count:
                return devices[:count]
        chosen: list[int] = []
        for _, devices in ordered:
            chosen.extend(devices[: count - len(chosen)])
            if len(chosen) == count:
                return chosen
        return None

    def unreserve(self, request: ReserveInput, result: ReserveResult) -> None:
        """Nothing to undo: the framework applies and releases the devices it was given."""
