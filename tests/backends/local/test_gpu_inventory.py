"""GPU discovery for the local node, driven by recorded machines (no GPU needed): the
inventory's count, memory, model, NUMA blocks and links; ``FLOTILLA_LOCAL_GPUS`` overriding
it; no NVML meaning no GPUs, said in one line."""

from __future__ import annotations

import ctypes.util
from collections.abc import Sequence
from pathlib import Path

import pytest

from flotilla.backends.local.backend import LocalBackend
from flotilla.backends.local.gpu_inventory import GPU_ENV, discover_gpus, numa_blocks
from flotilla.backends.local.gpu_sources import (
    GpuDevice,
    GpuProcess,
    GpuUnavailable,
    NvmlSource,
    RecordedSource,
)
from flotilla.model.cluster import GpuInterconnect
from tests.backends.gpu_recordings import recorded

GIB = 1024**3
MIB = 1024**2


class NoDriver:
    """A machine whose NVML does not start (no driver loaded)."""

    def devices(self) -> Sequence[GpuDevice]:
        raise GpuUnavailable("NVML did not start: Driver Not Loaded")

    def processes(self) -> Sequence[GpuProcess]:
        raise GpuUnavailable("NVML did not start: Driver Not Loaded")


def test_one_h200_is_found_with_its_memory_and_model() -> None:
    found = discover_gpus(source=recorded("h200-1"), environ={})
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


def test_an_nvlink_box_has_its_numa_blocks_and_links() -> None:
    found = discover_gpus(source=recorded("a100-8-nvlink"), environ={})
    inventory = found.inventory
    assert inventory is not None and inventory.topology is not None
    assert (inventory.count, inventory.memory) == (8, 80 * GIB)
    assert inventory.model == "NVIDIA A100-SXM4-80GB"
    assert inventory.numa_nodes == 2
    assert inventory.topology.numa == [0, 0, 0, 0, 1, 1, 1, 1]
    assert inventory.topology.interconnect is GpuInterconnect.NVLINK
    assert inventory.topology.links[2] == [
        "NV12",
        "NV12",
        "X",
        "NV12",
        "NV12",
        "NV12",
        "NV12",
        "NV12",
    ]
    assert found.notice == "GPUs: 8 × NVIDIA A100-SXM4-80GB, 80Gi each, nvlink, 2 NUMA nodes (NVML)"


def test_the_processes_on_each_device_are_read_with_their_memory() -> None:
    assert recorded("h200-1").processes() == [GpuProcess(0, 48211, 60 * GIB)]
    assert recorded("a100-8-nvlink").processes() == [
        GpuProcess(0, 31337, 40950 * MIB),
        GpuProcess(1, 31400, 10 * GIB),
        GpuProcess(1, 31401, 10230 * MIB),
    ]


def test_a_machine_without_topology_output_has_one_numa_group_and_pcie_links() -> None:
    source = RecordedSource(recorded("a100-8-nvlink").query_xml)
    inventory = discover_gpus(source=source, environ={}).inventory
    assert inventory is not None and inventory.topology is not None
    assert inventory.numa_nodes == 1
    assert inventory.topology.interconnect is GpuInterconnect.PCIE


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


def test_the_environment_overrides_discovery() -> None:
    told = discover_gpus(source=recorded("a100-8-nvlink"), environ={GPU_ENV: "2"})
    assert told.inventory is not None
    assert (told.inventory.count, told.inventory.memory, told.inventory.model) == (2, None, None)
    assert told.notice == f"GPUs: 2 from {GPU_ENV} (no discovery)"
    hidden = discover_gpus(source=recorded("a100-8-nvlink"), environ={GPU_ENV: "0"})
    assert hidden.inventory is None
    with pytest.raises(ValueError, match=f"{GPU_ENV}: expected a whole number of GPUs, got 'two'"):
        discover_gpus(source=recorded("h200-1"), environ={GPU_ENV: "two"})


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
    backend = LocalBackend(state_dir=tmp_path, gpu_source=recorded("a100-8-nvlink"))
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
