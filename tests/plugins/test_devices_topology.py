"""gpu-devices and topology: which NUMA group or PCIe switch whole GPUs come from, scopes
that keep a task's GPUs together, and the reasons given when a scope cannot be met."""

from __future__ import annotations

from typing import Any

import numpy as np

from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import CycleState, FilterInput, ReserveInput
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.nodes import GpuAllocation
from flotilla.model import scenario_from_data
from flotilla.plugins.devices import GpuDevices
from flotilla.sim import Simulator

PLUGIN = GpuDevices()


class Node:
    """One GPU node with a topology, and jobs asking for GPUs in a scope."""

    def __init__(self, gpus: int = 8, numa: int = 2, pcie: int | None = None) -> None:
        self.inventory: dict[str, Any] = {"count": gpus, "numa_nodes": numa}
        if pcie is not None:
            self.inventory["pcie_switches"] = pcie
        self.jobs: list[dict[str, Any]] = []

    def wants(self, gpu: float, scope: str | None = None) -> str:
        name = f"j{len(self.jobs)}"
        task: dict[str, Any] = {"name": "main", "resources": {"cpu": 1, "gpu": gpu}}
        if scope is not None:
            task["topology"] = {"gpu": scope}
        self.jobs.append({"name": name, "queue": "q", "tasks": [task]})
        return name

    def build(self, busy: dict[int, float]) -> tuple[Cluster, dict[str, SchedulingJob]]:
        sim = Simulator(
            scenario_from_data(
                {
                    "name": "topology",
                    "clusters": [
                        {
                            "name": "c",
                            "nodes": [
                                {
                                    "name": "g",
                                    "resources": {"cpu": 64, "memory": "256Gi"},
                                    "gpus": self.inventory,
                                }
                            ],
                        }
                    ],
                    "queues": [{"name": "q"}],
                    "jobs": self.jobs,
                }
            )
        )
        cluster = sim.clusters[0]
        if busy:
            held = GpuAllocation(shares=tuple(busy.items()))
            cluster.nodes.allocate(0, sim.space.vector({"gpu": sum(busy.values())}), held)
        return cluster, {name: sim.job_by_name[name].job for name in sim.job_by_name}


def devices(cluster: Cluster, job: SchedulingJob) -> list[int] | None:
    result = PLUGIN.reserve(
        ReserveInput(job=job, task=job.tasks[0], replica=0, cluster=cluster, row=0)
    )
    return None if result.gpus is None else result.gpus.device_ids


def fits(cluster: Cluster, job: SchedulingJob) -> bool:
    request = FilterInput(job=job, task=job.tasks[0], cluster=cluster, cycle=CycleState(time=0))
    return bool(PLUGIN.filter(request)[0])


def explain(cluster: Cluster, job: SchedulingJob) -> str | None:
    request = FilterInput(job=job, task=job.tasks[0], cluster=cluster, cycle=CycleState(time=0))
    return PLUGIN.explain(request, ~PLUGIN.filter(request))


# --- which devices ---------------------------------------------------------------------------


def test_whole_gpus_come_from_the_fullest_numa_group_that_can_hold_them() -> None:
    node = Node(gpus=8, numa=2)  # NUMA 0: devices 0-3, NUMA 1: devices 4-7
    two, four = node.wants(2), node.wants(4)
    cluster, jobs = node.build(busy={0: 1.0})
    assert devices(cluster, jobs[two]) == [1, 2]  # NUMA 0 has 3 free, the fewest that fit
    assert devices(cluster, jobs[four]) == [4, 5, 6, 7]  # only NUMA 1 holds 4


def test_without_a_scope_a_request_no_group_holds_takes_the_smallest_groups_first() -> None:
    node = Node(gpus=8, numa=2)
    four = node.wants(4)
    cluster, jobs = node.build(busy={0: 1.0, 4: 1.0, 5: 1.0})
    assert fits(cluster, jobs[four])
    assert devices(cluster, jobs[four]) == [6, 7, 1, 2]  # NUMA 1's two, then two of NUMA 0


def test_node_scope_may_span_numa_groups() -> None:
    node = Node(gpus=8, numa=2)
    four = node.wants(4, "node")
    cluster, jobs = node.build(busy={0: 1.0, 4: 1.0, 5: 1.0})
    assert devices(cluster, jobs[four]) == [6, 7, 1, 2]


def test_numa_scope_keeps_every_gpu_in_one_group_or_waits() -> None:
    node = Node(gpus=8, numa=2)
    three, two = node.wants(3, "numa"), node.wants(2, "numa")
    cluster, jobs = node.build(busy={0: 1.0, 1: 1.0, 4: 1.0, 5: 0.5})
    assert not fits(cluster, jobs[three])  # 2 free in NUMA 0, 2 whole free in NUMA 1
    assert devices(cluster, jobs[three]) is None
    assert explain(cluster, jobs[three]) == (
        "1 node with enough GPU in total but no numa group with 3 whole free GPUs"
    )
    assert fits(cluster, jobs[two])
    assert devices(cluster, jobs[two]) == [2, 3]


def test_pcie_scope_uses_switches_not_numa_groups() -> None:
    node = Node(gpus=8, numa=1, pcie=4)  # switches: 0-1, 2-3, 4-5, 6-7
    pcie, numa = node.wants(2, "pcie"), node.wants(2, "numa")
    cluster, jobs = node.build(busy={0: 1.0, 2: 1.0})
    assert devices(cluster, jobs[pcie]) == [4, 5]  # the first switch with both devices free
    assert devices(cluster, jobs[numa]) == [1, 3]  # one NUMA group: any two free devices


def test_pcie_scope_explains_a_missing_switch() -> None:
    node = Node(gpus=4, numa=1, pcie=2)
    two = node.wants(2, "pcie")
    cluster, jobs = node.build(busy={0: 1.0, 3: 0.25})
    assert not fits(cluster, jobs[two])
    assert explain(cluster, jobs[two]) == (
        "1 node with enough GPU in total but no pcie group with 2 whole free GPUs"
    )


def test_device_scope_allows_one_gpu_or_a_share_of_one_never_more() -> None:
    node = Node(gpus=4, numa=1)
    one, share, two = node.wants(1, "device"), node.wants(0.5, "device"), node.wants(2, "device")
    cluster, jobs = node.build(busy={})
    assert devices(cluster, jobs[one]) == [0]
    assert devices(cluster, jobs[share]) == [0]
    assert not fits(cluster, jobs[two])
    assert devices(cluster, jobs[two]) is None


def test_a_fraction_between_equal_devices_goes_to_the_busiest_numa_group() -> None:
    node = Node(gpus=4, numa=2)  # NUMA 0: devices 0-1, NUMA 1: devices 2-3
    quarter = node.wants(0.25)
    cluster, jobs = node.build(busy={0: 0.5, 2: 0.5, 3: 1.0})
    assert devices(cluster, jobs[quarter]) == [2]  # same share left as device 0; NUMA 1 fuller


def test_whole_gpus_never_take_a_partly_shared_device() -> None:
    node = Node(gpus=4, numa=1)
    two, three = node.wants(2), node.wants(3)
    cluster, jobs = node.build(busy={1: 0.25, 3: 0.5})  # 3.25 GPUs free, 2 of them whole
    assert devices(cluster, jobs[two]) == [0, 2]
    assert not fits(cluster, jobs[three])
    assert explain(cluster, jobs[three]) == (
        "1 node with enough GPU in total but fewer than 3 whole free GPUs"
    )


def test_reserving_leaves_the_node_table_unchanged() -> None:
    node = Node(gpus=8, numa=2)
    two = node.wants(2, "numa")
    cluster, jobs = node.build(busy={0: 1.0})
    before = cluster.nodes.device_free.copy()
    devices(cluster, jobs[two])
    np.testing.assert_array_equal(cluster.nodes.device_free, before)
