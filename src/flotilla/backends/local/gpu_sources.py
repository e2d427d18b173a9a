"""Where a machine's GPUs are read from: one small interface, NVML behind it on a real machine.

``GpuSource`` is all the rest of Flotilla knows of NVIDIA's libraries: the devices (model,
memory, PCI bus id, NUMA node, how each pair is joined) and the processes on them. ``NvmlSource``
asks NVML through the ``nvidia-ml-py`` binding (imported only when asked, so a machine without
the driver never loads it); ``RecordedSource`` reads what ``nvidia-smi -q -x`` and
``nvidia-smi topo -m`` printed on a real machine, so tests and demos run without a GPU and see
exactly the shapes a real one reports.

Links between two devices use ``nvidia-smi topo -m``'s names: ``NV<n>`` (NVLink, n links),
``PIX``/``PXB`` (one or several PCIe bridges), ``PHB`` (a PCIe host bridge), ``NODE`` (host
bridges within a NUMA node), ``SYS`` (across NUMA nodes).
"""

from __future__ import annotations

import importlib
import re
import xml.etree.ElementTree as ElementTree
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
    memory_total: int
    memory_used: int
    pci_bus_id: str
    numa_node: int | None
    links: Mapping[int, str] = field(default_factory=dict)
    """Peer device index → link (``NV12``, ``PIX``, ``SYS``, …)."""
    utilization: float | None = None
    """Percent of the last sample period a kernel ran (NVML's ``gpu`` utilisation)."""


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a device."""

    device: int
    pid: int
    memory_used: int


class GpuSource(Protocol):
    """What Flotilla reads of this machine's GPUs. Both calls raise ``GpuUnavailable``."""

    def devices(self) -> Sequence[GpuDevice]: ...

    def processes(self) -> Sequence[GpuProcess]: ...


# NVML's topology levels (nvmlGpuTopologyLevel_t) in nvidia-smi's names.
_TOPOLOGY_NAMES = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlSource:
    """NVML through ``nvidia-ml-py``: each call initialises NVML, reads, and shuts it down
    (discovery runs once at start, telemetry seldom; a held handle would pin the driver)."""

    def _nvml(self) -> Any:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError as error:  # pragma: no cover - a dependency of flotilla
            raise GpuUnavailable(f"the nvidia-ml-py package is not installed ({error})") from None
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            raise GpuUnavailable(f"NVML did not start: {_text(error)}") from None
        return nvml

    def devices(self) -> Sequence[GpuDevice]:
        nvml = self._nvml()
        try:
            handles = [
                nvml.nvmlDeviceGetHandleByIndex(index) for index in range(nvml.nvmlDeviceGetCount())
            ]
            return [self._device(nvml, index, handles) for index in range(len(handles))]
        except nvml.NVMLError as error:
            raise GpuUnavailable(f"NVML failed reading the devices: {_text(error)}") from None
        finally:
            nvml.nvmlShutdown()

    def _device(self, nvml: Any, index: int, handles: list[Any]) -> GpuDevice:
        handle = handles[index]
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
        links: dict[int, str] = {}
        for peer, other in enumerate(handles):
            if peer == index:
                continue
            links[peer] = self._link(nvml, handle, other)
        try:
            utilization: float | None = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except nvml.NVMLError:
            utilization = None
        return GpuDevice(
            index=index,
            model=_text(nvml.nvmlDeviceGetName(handle)),
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            memory_total=int(memory.total),
            memory_used=int(memory.used),
            pci_bus_id=bus_id,
            numa_node=self._numa_node(nvml, handle, bus_id),
            links=links,
            utilization=utilization,
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
        nvml = self._nvml()
        try:
            found: list[GpuProcess] = []
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    used = process.usedGpuMemory
                    found.append(GpuProcess(index, int(process.pid), int(used or 0)))
            return found
        except nvml.NVMLError as error:
            raise GpuUnavailable(f"NVML failed reading the processes: {_text(error)}") from None
        finally:
            nvml.nvmlShutdown()


def _mib(text: str | None) -> int:
    """``"143771 MiB"`` → bytes (0 for ``N/A`` or nothing)."""
    match = re.match(r"\s*(\d+)\s*MiB", text or "")
    return int(match.group(1)) * MIB if match else 0


def parse_topology(matrix: str) -> tuple[dict[int, dict[int, str]], dict[int, int | None]]:
    """``nvidia-smi topo -m``: per GPU its links to the other GPUs, and its NUMA affinity."""
    lines = [line for line in matrix.splitlines() if line.strip()]
    header = next((line.split("\t") for line in lines if "GPU0" in line.split()), None)
    if header is None:
        return {}, {}
    columns = [cell.strip() for cell in header]
    gpu_columns = {
        i: int(name[3:]) for i, name in enumerate(columns) if re.fullmatch(r"GPU\d+", name)
    }
    numa_column = columns.index("NUMA Affinity") if "NUMA Affinity" in columns else None
    links: dict[int, dict[int, str]] = {}
    numa: dict[int, int | None] = {}
    for line in lines:
        cells = [cell.strip() for cell in line.split("\t")]
        if not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        gpu = int(cells[0][3:])
        links[gpu] = {
            peer: cells[i] for i, peer in gpu_columns.items() if peer != gpu and i < len(cells)
        }
        affinity = (
            cells[numa_column] if numa_column is not None and numa_column < len(cells) else ""
        )
        numa[gpu] = int(affinity) if affinity.isdigit() else None
    return links, numa


@dataclass(frozen=True)
class RecordedSource:
    """What ``nvidia-smi -q -x`` (devices, memory, processes) and ``nvidia-smi topo -m``
    (links, NUMA affinity) printed on a real machine, read back as that machine's NVML would
    answer. ``topology`` may be empty (links and NUMA nodes then unknown)."""

    query_xml: str
    topology: str = ""

    def _gpus(self) -> list[ElementTree.Element]:
        try:
            root = ElementTree.fromstring(self.query_xml)
        except ElementTree.ParseError as error:
            raise GpuUnavailable(f"the recorded nvidia-smi output is not XML: {error}") from None
        return root.findall("gpu")

    def devices(self) -> Sequence[GpuDevice]:
        links, numa = parse_topology(self.topology)
        found = []
        for index, gpu in enumerate(self._gpus()):
            utilization = re.match(r"\s*(\d+)", gpu.findtext("utilization/gpu_util") or "")
            found.append(
                GpuDevice(
                    index=index,
                    model=(gpu.findtext("product_name") or "unknown").strip(),
                    uuid=(gpu.findtext("uuid") or "").strip(),
                    memory_total=_mib(gpu.findtext("fb_memory_usage/total")),
                    memory_used=_mib(gpu.findtext("fb_memory_usage/used")),
                    pci_bus_id=(gpu.findtext("pci/pci_bus_id") or gpu.get("id") or "").strip(),
                    numa_node=numa.get(index),
                    links=links.get(index, {}),
                    utilization=float(utilization.group(1)) if utilization else None,
                )
            )
        return found

    def processes(self) -> Sequence[GpuProcess]:
        return [
            GpuProcess(
                device=index,
                pid=int(process.findtext("pid") or 0),
                memory_used=_mib(process.findtext("used_memory")),
            )
            for index, gpu in enumerate(self._gpus())
            for process in gpu.findall("processes/process_info")
        ]
