"""A fake NVML at the call production makes: the ``pynvml`` functions Flotilla calls, replaced
on the real ``nvidia-ml-py`` module (``FakeNvml.install``), so production imports the real
binding and gets its own ``NVMLError`` classes (``NVMLError_NotSupported``, …), constants and
result structures (``c_nvmlMemory_t``, ``nvmlPciInfo_t``, ``c_nvmlUtilization_t``,
``c_nvmlProcessUtilizationSample_t``, the friendly objects of the process lists). A function
production calls that the fake does not provide fails the test (``_nvmlGetFunctionPointer``
raises), so nothing reaches a library that is not there.

The machines (``machine(name)``) are written from NVIDIA's documentation of these calls and
of the devices (names, memory in MiB as ``nvidia-smi`` shows it, MIG profile names), not
captured on those machines: ``scripts/gpu-check`` is what checks a real one. What each call
answers follows the driver:

- a device without a per-process utilisation figure (MIG instances, many drivers under MPS)
  raises ``NVML_ERROR_NOT_SUPPORTED`` from ``nvmlDeviceGetProcessUtilization``; one whose
  processes ran no kernel since the timestamp given raises ``NVML_ERROR_NOT_FOUND``;
- ``nvmlDeviceGetUtilizationRates`` on a MIG instance raises ``NVML_ERROR_NOT_SUPPORTED``;
- ``nvmlDeviceGetMigMode`` on a GPU that cannot do MIG raises ``NVML_ERROR_NOT_SUPPORTED``;
  ``nvmlDeviceGetMigDeviceHandleByIndex`` raises ``NVML_ERROR_NOT_FOUND`` for an empty slot;
- under MPS, ``nvmlDeviceGetComputeRunningProcesses`` lists the MPS server only and
  ``nvmlDeviceGetMPSComputeRunningProcesses`` the clients;
- ``nvmlInit`` without a driver raises ``NVML_ERROR_DRIVER_NOT_LOADED``; with a library older
  than the kernel module, ``NVML_ERROR_LIB_RM_VERSION_MISMATCH``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pynvml
import pytest

MIB = 2**20
GIB = 2**30

# nvmlErrorString's texts for the codes the fake raises.
ERROR_STRINGS = {
    pynvml.NVML_ERROR_UNINITIALIZED: "Uninitialized",
    pynvml.NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    pynvml.NVML_ERROR_NOT_FOUND: "Not Found",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    pynvml.NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    pynvml.NVML_ERROR_UNKNOWN: "Unknown Error",
}


@dataclass
class FakeProcess:
    """A process holding memory on a device. ``sm_util``: its percent of the device's SMs in
    the last sample period (``None``: it ran no kernel then). ``mps``: an MPS client (listed by
    ``nvmlDeviceGetMPSComputeRunningProcesses``, not the plain list)."""

    pid: int
    memory: int | None
    sm_util: int | None = None
    mps: bool = False


@dataclass
class FakeGpu:
    name: str
    uuid: str
    memory_total: int
    bus_id: str
    numa: int | None = 0
    utilization: int | None = 0
    """``nvmlDeviceGetUtilizationRates().gpu``; ``None``: NOT_SUPPORTED (a MIG instance)."""
    processes: list[FakeProcess] = field(default_factory=list)
    process_utilization: bool = True
    """Whether ``nvmlDeviceGetProcessUtilization`` is supported here."""
    mig: list[FakeGpu | None] | None = None
    """``None``: the GPU cannot do MIG; else its MIG slots (``None`` an empty one) and MIG on."""
    compute_mode: int = pynvml.NVML_COMPUTEMODE_DEFAULT


@dataclass(frozen=True)
class _Handle:
    """What ``nvmlDeviceGetHandleByIndex`` returns (an opaque pointer in the real binding)."""

    gpu: FakeGpu
    index: int
    parent: int | None = None

    def __hash__(self) -> int:
        return hash((self.index, self.parent))


@dataclass
class FakeNvml:
    gpus: list[FakeGpu]
    nvlink: bool = False
    numa_supported: bool = True
    init_error: int | None = None
    """The code ``nvmlInit`` fails with (``None``: it starts)."""
    processes_of: Callable[[FakeGpu], Iterable[FakeProcess]] | None = None
    """Where each device's processes come from (default: its ``processes``): a test's job."""
    fail: dict[str, BaseException] = field(default_factory=dict)
    """Function name → what it raises instead of answering."""
    calls: list[str] = field(default_factory=list)
    initialised: int = 0
    shut_down: int = 0
    _open: int = 0

    # --- what a test drives -----------------------------------------------------------------

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
        """Replace the binding's calls with this machine's answers until the test ends."""

        def missing(name: str) -> Any:
            raise AssertionError(f"the fake NVML has no {name}: production called it")

        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", missing)
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(pynvml, name, getattr(self, name))
        return self

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise self.fail[name]
        if name not in ("nvmlInit", "nvmlErrorString") and self._open <= 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    @staticmethod
    def error(code: int) -> pynvml.NVMLError:
        return pynvml.NVMLError(code)

    def _processes(self, gpu: FakeGpu) -> list[FakeProcess]:
        return list(self.processes_of(gpu) if self.processes_of else gpu.processes)

    # --- the calls --------------------------------------------------------------------------

    def nvmlErrorString(self, result: int) -> str:
        return ERROR_STRINGS.get(result, f"Unknown Error {result}")

    def nvmlInit(self) -> None:
        self._call("nvmlInit")
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised += 1
        self._open += 1

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")
        self.shut_down += 1
        self._open -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._call("nvmlSystemGetDriverVersion")
        return "550.90.07"

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._call("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(self.gpus[index], index)

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        self._call("nvmlDeviceGetName")
        return handle.gpu.name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        self._call("nvmlDeviceGetUUID")
        return handle.gpu.uuid

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> Any:
        self._call("nvmlDeviceGetMemoryInfo")
        used = sum(p.memory or 0 for p in self._processes(handle.gpu))
        total = handle.gpu.memory_total
        return pynvml.c_nvmlMemory_t(total=total, free=max(0, total - used), used=used)

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> Any:
        self._call("nvmlDeviceGetPciInfo")
        info = pynvml.nvmlPciInfo_t()
        info.busId = handle.gpu.bus_id.encode()
        info.busIdLegacy = handle.gpu.bus_id[-12:].encode()
        return info

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        self._call("nvmlDeviceGetUtilizationRates")
        if handle.gpu.utilization is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.c_nvmlUtilization_t(gpu=handle.gpu.utilization, memory=0)

    def nvmlDeviceGetNumaNodeId(self, handle: _Handle) -> int:
        self._call("nvmlDeviceGetNumaNodeId")
        if not self.numa_supported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return -1 if handle.gpu.numa is None else handle.gpu.numa

    def nvmlDeviceGetP2PStatus(self, one: _Handle, other: _Handle, index: int) -> int:
        self._call("nvmlDeviceGetP2PStatus")
        if index == pynvml.NVML_P2P_CAPS_INDEX_NVLINK and self.nvlink:
            return int(pynvml.NVML_P2P_STATUS_OK)
        return int(pynvml.NVML_P2P_STATUS_NOT_SUPPORTED)

    def nvmlDeviceGetTopologyCommonAncestor(self, one: _Handle, other: _Handle) -> int:
        self._call("nvmlDeviceGetTopologyCommonAncestor")
        if one.gpu.numa == other.gpu.numa:
            return int(pynvml.NVML_TOPOLOGY_NODE)
        return int(pynvml.NVML_TOPOLOGY_SYSTEM)

    def nvmlDeviceGetComputeMode(self, handle: _Handle) -> int:
        self._call("nvmlDeviceGetComputeMode")
        return handle.gpu.compute_mode

    def _listed(self, handle: _Handle, mps: bool) -> list[Any]:
        found = []
        for process in self._processes(handle.gpu):
            if process.mps != mps:
                continue
            memory = process.memory
            found.append(
                pynvml.nvmlFriendlyObject(
                    {
                        "pid": process.pid,
                        "usedGpuMemory": memory,  # None: NVML_VALUE_NOT_AVAILABLE
                        "gpuInstanceId": 0xFFFFFFFF if handle.parent is None else handle.index,
                        "computeInstanceId": 0xFFFFFFFF if handle.parent is None else 0,
                    }
                )
            )
        return found

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[Any]:
        self._call("nvmlDeviceGetComputeRunningProcesses")
        return self._listed(handle, mps=False)

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: _Handle) -> list[Any]:
        self._call("nvmlDeviceGetMPSComputeRunningProcesses")
        return self._listed(handle, mps=True)

    def nvmlDeviceGetProcessUtilization(self, handle: _Handle, last_seen: int) -> list[Any]:
        self._call("nvmlDeviceGetProcessUtilization")
        if not handle.gpu.process_utilization:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        samples = [
            pynvml.c_nvmlProcessUtilizationSample_t(
                pid=process.pid, timeStamp=last_seen + 1, smUtil=process.sm_util, memUtil=0
            )
            for process in self._processes(handle.gpu)
            if process.sm_util is not None
        ]
        if not samples:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return samples

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        self._call("nvmlDeviceGetMigMode")
        if handle.gpu.mig is None or handle.parent is not None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [pynvml.NVML_DEVICE_MIG_ENABLE] * 2

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        self._call("nvmlDeviceGetMaxMigDeviceCount")
        return 7 if handle.gpu.mig is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        self._call("nvmlDeviceGetMigDeviceHandleByIndex")
        slots = handle.gpu.mig or []
        instance = slots[index] if index < len(slots) else None
        if instance is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return _Handle(instance, index, parent=handle.index)


def _a100(index: int, bus: str, utilization: int, processes: list[FakeProcess]) -> FakeGpu:
    return FakeGpu(
        "NVIDIA A100-SXM4-80GB",
        f"GPU-{index}f0c2a77-3b9e-55d1-8c2e-6a4d0e9b7a1{index}",
        81920 * MIB,
        f"00000000:{bus}:00.0",
        numa=0 if index < 4 else 1,
        utilization=utilization,
        processes=processes,
    )


H200_UUID = "GPU-5b3e6c1d-8a0f-4f1e-9c55-0d2b7f3a9e41"
H100_UUID = "GPU-9d1f3e2a-6b4c-4a8e-b1d7-3c5e9f0a2b64"


def machine(name: str) -> FakeNvml:
    """A fresh machine:

    - ``h200-1``: one NVIDIA H200 (143771 MiB) on NUMA node 0, pid 48211 holding 60 GiB and
      97 % busy (no per-process figure: ``process_utilization`` off, as under many drivers).
    - ``a100-8-nvlink``: eight A100-SXM4-80GB joined by NVLink, GPUs 0-3 on NUMA node 0 and 4-7
      on node 1; pid 31337 holds 40950 MiB of device 0 (88 % busy), pids 31400 and 31401 hold
      10240 and 10230 MiB of device 1 (35 % busy); per-process figures not supported.
    - ``h100-mig``: an H100 80GB in MIG mode with a 3g.40gb and two 1g.10gb instances.
    - ``h100``: one H100 80GB, no process, per-process utilisation supported.
    """
    if name == "h200-1":
        h200 = FakeGpu(
            "NVIDIA H200",
            H200_UUID,
            143771 * MIB,
            "00000000:19:00.0",
            utilization=97,
            processes=[FakeProcess(48211, 60 * GIB, sm_util=97)],
            process_utilization=False,
        )
        return FakeNvml([h200])
    if name == "a100-8-nvlink":
        buses = ["07", "0F", "47", "4E", "87", "90", "B7", "BD"]
        gpus = [_a100(i, bus, 0, []) for i, bus in enumerate(buses)]
        gpus[0] = dataclasses.replace(
            gpus[0], utilization=88, processes=[FakeProcess(31337, 40950 * MIB)]
        )
        gpus[1] = dataclasses.replace(
            gpus[1],
            utilization=35,
            processes=[FakeProcess(31400, 10240 * MIB), FakeProcess(31401, 10230 * MIB)],
        )
        for gpu in gpus:
            gpu.process_utilization = False
        return FakeNvml(gpus, nvlink=True)
    if name == "h100-mig":

        def instance(slot: int, profile: str, mib: int) -> FakeGpu:
            return FakeGpu(
                f"NVIDIA H100 80GB HBM3 MIG {profile}",
                f"MIG-4a7c2e1b-8d3f-5b6a-9c0e-1f2d3b4c5d6{slot}",
                mib * MIB,
                "00000000:1B:00.0",
                utilization=None,
                process_utilization=False,
            )

        slots: list[FakeGpu | None] = [None] * 7
        slots[1] = instance(1, "3g.40gb", 40192)
        slots[5] = instance(5, "1g.10gb", 9856)
        slots[6] = instance(6, "1g.10gb", 9856)
        parent = FakeGpu(
            "NVIDIA H100 80GB HBM3", H100_UUID, 81559 * MIB, "00000000:1B:00.0", mig=slots
        )
        return FakeNvml([parent])
    if name == "h100":
        return FakeNvml(
            [FakeGpu("NVIDIA H100 80GB HBM3", H100_UUID, 81559 * MIB, "00000000:1B:00.0")]
        )
    raise ValueError(f"no fake machine {name!r}")


def install(monkeypatch: pytest.MonkeyPatch, name: str) -> FakeNvml:
    """``machine(name)``, installed as the ``pynvml`` production imports."""
    return machine(name).install(monkeypatch)


def job_on_gpu(
    pid_file: Any, memory: int = 60 * GIB, sm_util: int | None = 97
) -> Callable[[FakeGpu], list[FakeProcess]]:
    """A device whose one process is whatever pid the job wrote to ``pid_file``
    (``writes_its_pid``), holding ``memory``: a test's job as the GPU's user."""

    def processes(gpu: FakeGpu) -> list[FakeProcess]:
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            return []
        return [FakeProcess(pid, memory, sm_util)]

    return processes


def writes_its_pid(pid_file: Any, then: str) -> str:
    """Shell: write this shell's pid to ``pid_file`` at once (renamed into place, so a reader
    never sees half of it), then run ``then``."""
    return f"echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file} && {then}"
