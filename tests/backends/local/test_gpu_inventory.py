"""GPU discovery for the local node through NVML, over a fake NVML (no GPU needed): the
inventory's count, memory, model, NUMA blocks and links; MIG instances as devices;
``FLOTILLA_LOCAL_GPUS`` overriding it; no NVML meaning no GPUs, said in one line."""

from __future__ import annotations

import ctypes.util
from collections.abc import Sequence
from pathlib import Path

import pytest

from flotilla.backends import BackendRunState, DispatchRequest, ReplicaPlacement
from flotilla.backends.local.backend import LocalBackend
from flotilla.backends.local.gpu_inventory import GPU_ENV, discover_gpus, numa_blocks
from flotilla.backends.local.gpu_sources import (
    GpuDevice,
    GpuProcess,
    GpuUnavailable,
    NvmlSource,
)
from flotilla.model.cluster import GpuInterconnect
from tests.backends.fake_nvml import install
from tests.backends.support import LocalHarness, node_of, read_all

GIB = 1024**3
MIB = 1024**2


class NoDriver:
    """A machine whose NVML does not start (no driver loaded)."""

    def devices(self) -> Sequence[GpuDevice]:
        raise GpuUnavailable("NVML did not start: Driver Not Loaded")

    def processes(self) -> Sequence[GpuProcess]:
        raise GpuUnavailable("NVML did not start: Driver Not Loaded")

    def close(self) -> None:
        pass


def test_one_h200_is_found_with_its_memory_and_model(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, "h200-1")
    found = discover_gpus(source=NvmlSource(), environ={})
    assert found.inventory is not None
    assert found.inventory.count == 1
    assert found.inventory.memory == 143771 * MIB
    assert found.inventory.model == "NVIDIA H200"
    assert found.labels == {
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.product": "NVIDIA-H200",
        "nvidia.com/gpu.memory": "143771",
    }
    assert found.notice == "GPUs: 1 × NVIDIA H200, 140.401Gi each (NVML)"


def test_an_nvlink_box_has_its_numa_blocks_and_links(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, "a100-8-nvlink")
    found = discover_gpus(source=NvmlSource(), environ={})
    inventory = found.inventory
    assert inventory is not None and inventory.topology is not None
    assert (inventory.count, inventory.memory) == (8, 80 * GIB)
    assert inventory.model == "NVIDIA A100-SXM4-80GB"
    assert inventory.numa_nodes == 2
    assert inventory.topology.numa == [0, 0, 0, 0, 1, 1, 1, 1]
    assert inventory.topology.interconnect is GpuInterconnect.NVLINK
    assert inventory.topology.links[2] == ["NV", "NV", "X", "NV", "NV", "NV", "NV", "NV"]
    assert found.notice == "GPUs: 8 × NVIDIA A100-SXM4-80GB, 80Gi each, nvlink, 2 NUMA nodes (NVML)"


def test_the_processes_on_each_device_are_read_with_their_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, "h200-1")
    assert NvmlSource().processes() == [GpuProcess(0, 48211, 60 * GIB)]
    install(monkeypatch, "a100-8-nvlink")
    assert NvmlSource().processes() == [
        GpuProcess(0, 31337, 40950 * MIB),
        GpuProcess(1, 31400, 10 * GIB),
        GpuProcess(1, 31401, 10230 * MIB),
    ]


def test_a_machine_without_nvlink_or_numa_answers_has_pcie_links_and_the_kernels_numa(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NVML without NvLink between the GPUs says how PCIe joins them; a driver without
    ``nvmlDeviceGetNumaNodeId`` (NOT_SUPPORTED) leaves the kernel's answer for the PCI
    address, none here: one NUMA group."""
    fake = install(monkeypatch, "a100-8-nvlink")
    fake.nvlink, fake.numa_supported = False, False
    inventory = discover_gpus(source=NvmlSource(), environ={}).inventory
    assert inventory is not None and inventory.topology is not None
    assert inventory.numa_nodes == 1
    assert inventory.topology.interconnect is GpuInterconnect.PCIE
    assert (inventory.topology.links[0][1], inventory.topology.links[0][4]) == ("NODE", "SYS")


def test_a_mig_gpu_is_its_mig_instances_each_with_its_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, "h100-mig")
    found = discover_gpus(source=NvmlSource(), environ={})
    devices = found.devices
    assert [device.uuid[:4] for device in devices] == ["MIG-"] * 3
    assert [device.memory_total // MIB for device in devices] == [40192, 9856, 9856]
    assert {device.mig_parent for device in devices} == {"GPU-9d1f3e2a-6b4c-4a8e-b1d7-3c5e9f0a2b64"}
    assert found.inventory is not None
    assert (found.inventory.count, found.inventory.memory) == (3, 9856 * MIB)
    assert found.notice.endswith(", MIG instances of 1 GPU (NVML)"), found.notice


def test_a_mig_gpu_without_instances_gives_no_device_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = install(monkeypatch, "h100-mig")
    fake.gpus[0].mig = [None] * 7
    found = discover_gpus(source=NvmlSource(), environ={})
    assert found.inventory is None
    assert found.notice == "GPUs: none (NVML reports no device, or no MIG instance)"


def test_nvml_is_started_once_per_source_and_shut_down_by_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = install(monkeypatch, "h200-1")
    source = NvmlSource()
    source.devices()
    source.processes()
    source.processes()
    assert (fake.initialised, fake.shut_down) == (1, 0)
    source.close()
    assert fake.shut_down == 1


def test_a_library_older_than_the_driver_is_unavailable_saying_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pynvml

    fake = install(monkeypatch, "h200-1")
    fake.init_error = pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
    found = discover_gpus(source=NvmlSource(), environ={})
    assert found.notice == (
        "GPUs: none (NVML did not start: RM has detected an NVML/RM version mismatch.)"
    )


@pytest.mark.parametrize(
    ("numa", "blocks"),
    [
        ([0, 0, 1, 1], 2),
        ([3, 3, 1, 1, 7, 7, 5, 5], 4),  # a DGX A100's NUMA nodes are not numbered in order
        ([0, 1, 0, 1], 1),  # interleaved: the device model has no such shape
        ([0, 0, 0, 1], 1),  # unequal blocks
        ([0, None], 1),
        ([], 1),
    ],
)
def test_numa_blocks_are_equal_contiguous_runs_of_ids(numa: list[int | None], blocks: int) -> None:
    assert numa_blocks(numa) == blocks


def test_the_environment_overrides_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, "a100-8-nvlink")
    told = discover_gpus(source=NvmlSource(), environ={GPU_ENV: "2"})
    assert told.inventory is not None
    assert (told.inventory.count, told.inventory.memory, told.inventory.model) == (2, None, None)
    assert told.notice == f"GPUs: 2 from {GPU_ENV} (no discovery)"
    hidden = discover_gpus(source=NvmlSource(), environ={GPU_ENV: "0"})
    assert hidden.inventory is None
    with pytest.raises(ValueError, match=f"{GPU_ENV}: expected a whole number of GPUs, got 'two'"):
        discover_gpus(source=NvmlSource(), environ={GPU_ENV: "two"})


def test_without_nvml_there_are_no_gpus_and_one_line_says_why() -> None:
    found = discover_gpus(source=NoDriver(), environ={})
    assert found.inventory is None
    assert found.notice == "GPUs: none (NVML did not start: Driver Not Loaded)"
    assert "\n" not in found.notice


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has NVML"
)
def test_nvml_on_a_machine_without_the_driver_is_unavailable_not_an_error() -> None:
    with pytest.raises(GpuUnavailable, match="NVML did not start"):
        NvmlSource().devices()
    assert discover_gpus(environ={}).notice.startswith("GPUs: none (NVML did not start")


def test_the_local_node_carries_the_discovered_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(GPU_ENV, raising=False)
    install(monkeypatch, "a100-8-nvlink")
    backend = LocalBackend(state_dir=tmp_path)
    try:
        node = backend.inventory().nodes[0]
        assert backend.gpu_notice.endswith("2 NUMA nodes (NVML)")
    finally:
        backend.close()
    assert (node.gpu_count, node.capacity["gpu"], node.gpu_memory) == (8, 8.0, 80 * GIB)
    assert node.capacity["gpu_memory"] == 8 * 80 * GIB
    assert (node.numa_nodes, node.gpu_model) == (2, "NVIDIA A100-SXM4-80GB")
    assert node.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert node.labels["backend"] == "local"


@pytest.mark.parametrize(
    ("name", "gpu_ids", "shown"),
    [
        (
            "a100-8-nvlink",
            (2, 5),
            "GPU-2f0c2a77-3b9e-55d1-8c2e-6a4d0e9b7a12,GPU-5f0c2a77-3b9e-55d1-8c2e-6a4d0e9b7a15",
        ),
        ("h100-mig", (1,), "MIG-4a7c2e1b-8d3f-5b6a-9c0e-1f2d3b4c5d65"),
    ],
)
def test_a_job_sees_its_devices_by_uuid(
    local: LocalHarness,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    gpu_ids: tuple[int, ...],
    shown: str,
) -> None:
    """``CUDA_VISIBLE_DEVICES`` names the devices by UUID (NVML's index order is not CUDA's on
    a node of mixed GPUs; a MIG instance has no index at all), whatever the job set."""
    monkeypatch.delenv(GPU_ENV, raising=False)
    install(monkeypatch, name)
    backend = local.make()
    backend.dispatch(
        DispatchRequest(
            run_id="run-1",
            job="job-a",
            cluster=backend.cluster,
            placements=(ReplicaPlacement("main", 0, node_of(backend), gpu_ids=gpu_ids),),
            payload={
                "command": ["sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES"'],
                "env": {"CUDA_VISIBLE_DEVICES": "0,1,2,3"},
            },
            resources={"main": {"cpu": 0.1, "gpu": len(gpu_ids)}},
        )
    )
    assert local.wait_terminal(backend, "run-1").state is BackendRunState.SUCCEEDED
    assert read_all(backend, "run-1") == f"{shown}\n"
