"""gpu-devices: whole GPUs take whole idle devices; fractions pack onto the fullest device."""

from __future__ import annotations

from flotilla.framework.nodes import GpuAllocation
from flotilla.plugins.devices import GpuDevices
from tests.builders import Fleet, cluster, fleet, job, node, scenario
from tests.plugins.helpers import filter_input, reserve_input, rows

PLUGIN = GpuDevices()


def gpu_fleet(*requests: float, gpus: int = 4, memory: str | None = None) -> Fleet:
    return fleet(
        scenario(
            clusters=[cluster("c", node("g", cpu=64, gpu=gpus, gpu_memory=memory))],
            jobs=[job(f"j{i}", cpu=1, gpu=gpu) for i, gpu in enumerate(requests)],
        )
    )


def hold(f: Fleet, shares: dict[int, float]) -> None:
    allocation = GpuAllocation(shares=tuple(shares.items()))
    f.cluster().nodes.allocate(0, f.space.vector({"gpu": sum(shares.values())}), allocation)


def test_whole_gpus_take_the_first_idle_devices() -> None:
    f = gpu_fleet(2)
    hold(f, {0: 0.5})
    result = PLUGIN.reserve(reserve_input(f.job("j0"), f.cluster(), 0))
    assert result.status.ok
    assert result.gpus is not None
    assert result.gpus.shares == ((1, 1.0), (2, 1.0))


def test_a_fraction_goes_to_the_fullest_device_that_still_fits() -> None:
    f = gpu_fleet(0.25)
    hold(f, {0: 0.5, 1: 0.75, 2: 0.9})
    result = PLUGIN.reserve(reserve_input(f.job("j0"), f.cluster(), 0))
    assert result.gpus is not None
    assert result.gpus.shares == ((1, 0.25),)  # 0.25 free on 1; 2 has only 0.1 left


def test_a_fraction_never_takes_an_idle_device_while_a_shared_one_has_room() -> None:
    f = gpu_fleet(0.5, gpus=2)
    hold(f, {1: 0.5})
    result = PLUGIN.reserve(reserve_input(f.job("j0"), f.cluster(), 0))
    assert result.gpus is not None
    assert result.gpus.device_ids == [1]


def test_filter_counts_whole_idle_devices_for_whole_gpu_requests() -> None:
    f = gpu_fleet(2, 0.5, gpus=2)
    hold(f, {0: 0.25})
    assert rows(PLUGIN.filter(filter_input(f.job("j0"), f.cluster()))) == []
    assert rows(PLUGIN.filter(filter_input(f.job("j1"), f.cluster()))) == [0]


def test_gpu_memory_per_device_is_respected() -> None:
    f = fleet(
        scenario(
            clusters=[cluster("c", node("g", cpu=8, gpu=1, gpu_memory="40Gi"))],
            jobs=[
                job("fits", cpu=1, gpu=0.5, gpu_memory="40Gi"),
                job("too-big", cpu=1, gpu=0.5, gpu_memory="48Gi"),
            ],
        )
    )
    assert rows(PLUGIN.filter(filter_input(f.job("fits"), f.cluster()))) == [0]
    request = filter_input(f.job("too-big"), f.cluster())
    assert rows(PLUGIN.filter(request)) == []
    assert PLUGIN.explain(request, ~PLUGIN.filter(request)) == (
        "1 node with enough GPU in total but no single GPU with 0.5 of it free and 48Gi GPU memory"
    )


def test_jobs_without_gpus_pass_every_node_and_reserve_nothing() -> None:
    f = fleet(scenario(clusters=[cluster("c", node("g", gpu=1), node("cpu"))], jobs=[job()]))
    assert rows(PLUGIN.filter(filter_input(f.job("j"), f.cluster()))) == [0, 1]
    assert PLUGIN.reserve(reserve_input(f.job("j"), f.cluster(), 1)).gpus is None


def test_explain_leaves_a_plain_gpu_shortage_to_resources_fit() -> None:
    # 4 GPUs for an 8-GPU request: resources-fit says "too little free gpu"; the device
    # plugin only explains nodes that have the GPU in total but not on usable devices.
    f = gpu_fleet(8, gpus=4)
    request = filter_input(f.job("j0"), f.cluster())
    assert PLUGIN.explain(request, ~PLUGIN.filter(request)) is None


def test_a_cluster_that_hands_out_whole_devices_takes_no_share_of_one() -> None:
    """Kubernetes' device plugin hands out whole ``nvidia.com/gpu`` devices: a ``gpu: 0.5``
    placed there was refused at dispatch and failed the job. Such a cluster
    (``Cluster.whole_gpus``) is no candidate for a share; whole GPUs still go there."""
    f = gpu_fleet(0.5, 1)
    c = f.cluster()
    c.whole_gpus = True
    c.backend = "kubernetes"
    half = filter_input(f.job("j0"), c)
    assert rows(PLUGIN.filter(half)) == []
    assert PLUGIN.explain(half, ~PLUGIN.filter(half)) == (
        "gpu 0.5 is a share of a device, and this cluster's backend (kubernetes) hands out "
        "whole devices only"
    )
    assert rows(PLUGIN.filter(filter_input(f.job("j1"), c))) == [0]
