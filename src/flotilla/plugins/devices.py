"""GPU devices: whole GPUs get whole free devices, fractions share one device up to 1.0.

Fractions are packed onto the device with the least free share that still fits, so idle
devices stay whole for multi-GPU requests.
"""

from __future__ import annotations

import numpy as np

from flotilla.framework.interfaces import FilterInput, ReserveInput, ReserveResult, Status
from flotilla.framework.nodes import GpuAllocation, Mask
from flotilla.framework.resources import EPSILON
from flotilla.model.quantity import format_quantity


class GpuDevices:
    name = "gpu-devices"

    def filter(self, request: FilterInput) -> Mask:
        nodes = request.cluster.nodes
        gpu = request.task.gpu
        if gpu <= 0:
            return np.ones(len(nodes), dtype=bool)
        usable = self._usable_devices(request)
        if gpu < 1:
            return np.asarray(usable.any(axis=1), dtype=bool)
        return np.asarray(np.count_nonzero(usable, axis=1) >= int(gpu), dtype=bool)

    def _usable_devices(self, request: FilterInput | ReserveInput) -> Mask:
        nodes = request.cluster.nodes
        gpu, memory = request.task.gpu, request.task.gpu_memory
        need_share = gpu if gpu < 1 else 1.0
        per_device_memory = memory if gpu < 1 else memory / gpu
        usable: Mask = (nodes.device_free >= need_share - EPSILON) & (
            nodes.device_memory_free >= per_device_memory - EPSILON
        )
        return usable

    def explain(self, request: FilterInput, rejected: Mask) -> str | None:
        count = int(np.count_nonzero(rejected))
        gpu = request.task.gpu
        memory = request.task.gpu_memory
        extra = f" and {format_quantity('gpu_memory', memory)} GPU memory" if memory else ""
        if gpu < 1:
            what = f"no single GPU with {gpu:g} of it free{extra}"
        else:
            what = f"fewer than {int(gpu)} whole free GPUs{extra}"
        return f"{count} node{'s' if count != 1 else ''} with {what}"

    def reserve(self, request: ReserveInput) -> ReserveResult:
        gpu = request.task.gpu
        if gpu <= 0:
            return ReserveResult()
        nodes = request.cluster.nodes
        usable = self._usable_devices(request)[request.row]
        candidates = np.flatnonzero(usable)
        if gpu < 1:
            if len(candidates) == 0:
                return ReserveResult(Status.unschedulable("no GPU share left on the node"))
            free = nodes.device_free[request.row, candidates]
            device = int(candidates[int(np.argmin(free))])
            shares: tuple[tuple[int, float], ...] = ((device, gpu),)
        else:
            count = int(gpu)
            if len(candidates) < count:
                return ReserveResult(Status.unschedulable("not enough whole GPUs left on the node"))
            shares = tuple((int(device), 1.0) for device in candidates[:count])
        return ReserveResult(gpus=GpuAllocation(shares=shares, memory=request.task.gpu_memory))

    def unreserve(self, request: ReserveInput, result: ReserveResult) -> None:
        """Nothing to undo: the framework applies and releases the devices it was given."""
