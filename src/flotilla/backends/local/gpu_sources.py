"""Where a machine's GPUs are read from: one small interface, NVML behind it.

``GpuSource`` is all the rest of Flotilla knows of NVIDIA's libraries: the devices (model,
UUID, memory, PCI bus id, NUMA node, how each pair is joined) and the processes on them.
``NvmlSource`` asks NVML through the ``nvidia-ml-py`` binding (imported only when asked, so a
machine without the driver never loads it). Tests replace the binding's calls with a fake
machine (``tests/backends/fake_nvml.py``): the code here is what runs on hardware.

A GPU in MIG mode is not a device: each of its MIG instances is one (its ``MIG-…`` UUID, its
own memory), and a MIG GPU with no instance made gives none. Links between two devices use
``nvidia-smi topo -m``'s names: ``NV`` (NVLink), ``PIX``/``PXB`` (one or several PCIe
bridges), ``PHB`` (a PCIe host bridge), ``NODE`` (host bridges within a NUMA node), ``SYS``
(across NUMA nodes); MIG instances have none.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

MIB = 1024**2


class GpuUnavailable(Exception):
    """No GPU can be read here; the message is one line saying why (shown at start)."""


@dataclass(frozen=True)
class GpuDevice:
    """One device as its driver reports it; memory in bytes, ``numa_node`` None if unknown."""

    index: int
    model: str
    uuid: str
    """What ``CUDA_VISIBLE_DEVICES`` names it by (``GPU-…``, or ``MIG-…`` for an instance)."""
    memory_total: int
    memory_used: int
    pci_bus_id: str
    numa_node: int | None
    links: Mapping[int, str] = field(default_factory=dict)
    """Peer device index → link (``NV``, ``PIX``, ``SYS``, …)."""
    utilization: float | None = None
    """Percent of the last sample period a kernel ran (NVML's ``gpu`` utilisation; ``None``
    where NVML has none, a MIG instance)."""
    mig_parent: str | None = None
    """The UUID of the GPU this MIG instance is part of (``None``: a whole GPU)."""


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a device. ``sm_utilization``: its own percent of the
    device's SMs over the last period, where NVML gives one (``None``: it does not here)."""

    device: int
    pid: int
    memory_used: int
    sm_utilization: float | None = None
    mps_client: bool = False


class GpuSource(Protocol):
    """What Flotilla reads of this machine's GPUs. Both reads raise ``GpuUnavailable``;
    ``close`` lets go of the driver."""

    def devices(self) -> Sequence[GpuDevice]: ...

    def processes(self) -> Sequence[GpuProcess]: ...

    def close(self) -> None: ...


# NVML's topology levels (nvmlGpuTopologyLevel_t) in nvidia-smi's names.
_TOPOLOGY_NAMES = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _code(error: Exception) -> int | None:
    """The NVML return code an ``NVMLError`` carries."""
    return getattr(error, "value", None)


class NvmlSource:
    """NVML through ``nvidia-ml-py``, initialised at the first read and kept until ``close``
    (``nvmlInit`` takes seconds on a GPU without persistence mode). Safe from several threads:
    NVML is, and the little state here is under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nvml: Any = None
        self._seen: dict[str, int] = {}
        """Device UUID → the timestamp of its last per-process utilisation sample read."""

    def _started(self) -> Any:
        with self._lock:
            if self._nvml is not None:
                return self._nvml
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError as error:  # pragma: no cover - a dependency of flotilla
                raise GpuUnavailable(
                    f"the nvidia-ml-py package is not installed ({error})"
                ) from None
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as error:
                raise GpuUnavailable(f"NVML did not start: {_text(error)}") from None
            self._nvml = nvml
            return nvml

    def close(self) -> None:
        with self._lock:
            nvml, self._nvml = self._nvml, None
        if nvml is not None:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()

    def _handles(self, nvml: Any) -> list[tuple[Any, Any | None]]:
        """Every device's handle, with its MIG parent's (``None`` for a whole GPU)."""
        found: list[tuple[Any, Any | None]] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            try:
                mig_on = nvml.nvmlDeviceGetMigMode(handle)[0] == nvml.NVML_DEVICE_MIG_ENABLE
            except nvml.NVMLError:  # NOT_SUPPORTED: a GPU that cannot do MIG
                mig_on = False
            if not mig_on:
                found.append((handle, None))
                continue
            for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    found.append((nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot), handle))
                except nvml.NVMLError as error:
                    if _code(error) != nvml.NVML_ERROR_NOT_FOUND:
                        raise  # NOT_FOUND: an empty slot
        return found

    def devices(self) -> Sequence[GpuDevice]:
        nvml = self._started()
        try:
            handles = self._handles(nvml)
            return [self._device(nvml, index, handles) for index in range(len(handles))]
        except nvml.NVMLError as error:
            raise GpuUnavailable(f"NVML failed reading the devices: {_text(error)}") from None

    def _device(self, nvml: Any, index: int, handles: list[tuple[Any, Any | None]]) -> GpuDevice:
        handle, parent = handles[index]
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        physical = handle if parent is None else parent
        bus_id = _text(nvml.nvmlDeviceGetPciInfo(physical).busId)
        links: dict[int, str] = {}
        if parent is None:
            for peer, (other, other_parent) in enumerate(handles):
                if peer != index and other_parent is None:
                    links[peer] = self._link(nvml, handle, other)
        try:
            utilization: float | None = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except nvml.NVMLError:  # NOT_SUPPORTED on a MIG instance
            utilization = None
        return GpuDevice(
            index=index,
            model=_text(nvml.nvmlDeviceGetName(handle)),
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            memory_total=int(memory.total),
            memory_used=int(memory.used),
            pci_bus_id=bus_id,
            numa_node=self._numa_node(nvml, physical, bus_id),
            links=links,
            utilization=utilization,
            mig_parent=None if parent is None else _text(nvml.nvmlDeviceGetUUID(parent)),
        )

    @staticmethod
    def _link(nvml: Any, handle: Any, other: Any) -> str:
        try:
            nvlink = nvml.nvmlDeviceGetP2PStatus(handle, other, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
            if nvlink == nvml.NVML_P2P_STATUS_OK:
                return "NV"
        except nvml.NVMLError:
            pass
        try:
            level = int(nvml.nvmlDeviceGetTopologyCommonAncestor(handle, other))
        except nvml.NVMLError:
            return "SYS"
        return _TOPOLOGY_NAMES.get(level, "SYS")

    @staticmethod
    def _numa_node(nvml: Any, handle: Any, bus_id: str) -> int | None:
        """NVML's answer (recent drivers), else the kernel's for the device's PCI address."""
        try:
            node = int(nvml.nvmlDeviceGetNumaNodeId(handle))
            if node >= 0:
                return node
        except (nvml.NVMLError, AttributeError):
            pass
        address = bus_id.lower()[-12:]  # NVML pads the domain to 8 digits, sysfs to 4
        try:
            with open(f"/sys/bus/pci/devices/{address}/numa_node") as found:
                node = int(found.read().strip())
        except (OSError, ValueError):
            return None
        return node if node >= 0 else None

    def processes(self) -> Sequence[GpuProcess]:
        """Every process holding memory on a device: the plain list and, under MPS, the
        clients (the plain list then shows only the MPS server); each with its own SM
        utilisation where the device gives one."""
        nvml = self._started()
        try:
            found: list[GpuProcess] = []
            for index, (handle, _) in enumerate(self._handles(nvml)):
                sm = self._process_utilization(nvml, handle)
                listed: dict[int, tuple[int, bool]] = {}
                for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    listed[int(process.pid)] = (int(process.usedGpuMemory or 0), False)
                for process in self._mps_clients(nvml, handle):
                    listed[int(process.pid)] = (int(process.usedGpuMemory or 0), True)
                for pid, (memory, client) in listed.items():
                    own = None if sm is None else sm.get(pid, 0.0)
                    found.append(GpuProcess(index, pid, memory, own, client))
            return found
        except nvml.NVMLError as error:
            raise GpuUnavailable(f"NVML failed reading the processes: {_text(error)}") from None

    @staticmethod
    def _mps_clients(nvml: Any, handle: Any) -> list[Any]:
        try:
            return list(nvml.nvmlDeviceGetMPSComputeRunningProcesses(handle))
        except nvml.NVMLError as error:
            if _code(error) in (
                nvml.NVML_ERROR_NOT_SUPPORTED,
                nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
            ):
                return []
            raise

    def _process_utilization(self, nvml: Any, handle: Any) -> dict[int, float] | None:
        """Pid → its mean SM percent since the last read of this device; ``None`` where NVML
        has no per-process figure (NOT_SUPPORTED: MIG, many drivers under MPS)."""
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, self._seen.get(uuid, 0))
        except nvml.NVMLError as error:
            if _code(error) == nvml.NVML_ERROR_NOT_FOUND:
                return {}  # no kernel ran since the last read
            return None
        sums: dict[int, list[float]] = defaultdict(list)
        latest = self._seen.get(uuid, 0)
        for sample in samples:
            sums[int(sample.pid)].append(float(sample.smUtil))
            latest = max(latest, int(sample.timeStamp))
        self._seen[uuid] = latest
        return {pid: sum(values) / len(values) for pid, values in sums.items()}
