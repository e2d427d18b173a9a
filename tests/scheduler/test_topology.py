"""Topology-aware gangs (issue 28): a job's replicas in one domain of a cluster's topology
level, required or preferred, with the GPU scopes inside a node still applying."""

from __future__ import annotations

from typing import Any

import pytest

from flotilla.model import SpecError
from tests.builders import Data, cluster, job, load, nodes, scenario, simulate_report


def rack(name: str, count: int, block: str = "b1", **kwargs: Any) -> Data:
    return nodes(count, name=f"{block}-{name}-n", labels={"block": block, "rack": name}, **kwargs)


def topology_cluster(*groups: Data) -> Data:
    return {**cluster("c", *groups), "topology": ["block", "rack"]}


def gang(name: str, replicas: int, ask: dict[str, str], **kwargs: Any) -> Data:
    return {**job(name, replicas=replicas, **kwargs), "topology": ask}


def racks_of(report: Any, name: str) -> set[str]:
    return {node.split("-n-")[0] for node in report.nodes_of(name)}


def test_required_puts_every_replica_in_one_rack_the_tightest_that_fits() -> None:
    """r1 has 3 free nodes, r2 2: a 2-replica gang goes whole into r2 (the tightest fit),
    leaving r1 whole for a 3-replica one."""
    data = scenario(
        clusters=[topology_cluster(rack("r1", 3, cpu=4), rack("r2", 2, cpu=4))],
        queues=["q"],
        jobs=[
            gang("pair", 2, {"required": "rack"}, cpu=4),
            gang("trio", 3, {"required": "rack"}, cpu=4),
        ],
    )
    report = simulate_report(data, until=0)
    assert racks_of(report, "pair") == {"b1-r2"}
    assert racks_of(report, "trio") == {"b1-r1"}


def test_required_waits_with_the_reason_when_no_domain_can_hold_it() -> None:
    data = scenario(
        clusters=[topology_cluster(rack("r1", 2, cpu=4), rack("r2", 2, cpu=4))],
        queues=["q"],
        jobs=[gang("wide", 3, {"required": "rack"}, cpu=4)],
    )
    report = simulate_report(data, until=0)
    assert report.state("wide") == "queued"
    assert (
        "no rack domain can hold all 3 replicas (topology required: rack"
        in (report.job("wide")["reason"])
    )


def test_a_rack_name_repeated_in_another_block_is_another_domain() -> None:
    """Two racks called r1, one in each block, two nodes each: three replicas do not fit
    one of them, though four nodes carry rack=r1."""
    data = scenario(
        clusters=[
            topology_cluster(rack("r1", 2, block="b1", cpu=4), rack("r1", 2, block="b2", cpu=4))
        ],
        queues=["q"],
        jobs=[
            gang("wide", 3, {"required": "rack"}, cpu=4),
            gang("ok", 3, {"required": "block"}, cpu=1),
        ],
    )
    report = simulate_report(data, until=0)
    assert report.state("wide") == "queued"
    assert len({node.split("-")[0] for node in report.nodes_of("ok")}) == 1


def test_preferred_keeps_one_domain_when_it_can() -> None:
    """near takes a whole rack; far (two 2-cpu replicas) then fits in the other rack and
    stays in it. (A preferred job that no rack can hold goes to the fewest racks: the tests
    below and ``tests/scenarios/policies/topology-preferred-fewest-domains.yaml``.)"""
    data = scenario(
        clusters=[topology_cluster(rack("r1", 2, cpu=4), rack("r2", 2, cpu=4))],
        queues=["q"],
        jobs=[
            gang("near", 2, {"preferred": "rack"}, cpu=4),
            gang("far", 2, {"preferred": "rack"}, cpu=2, submit_at=1),
        ],
    )
    report = simulate_report(data, until=1)
    assert len(racks_of(report, "near")) == 1
    assert len(racks_of(report, "far")) == 1
    assert racks_of(report, "far") != racks_of(report, "near")


def test_gpu_scopes_inside_a_node_still_apply() -> None:
    """Each replica wants 2 GPUs on one NUMA node; a rack whose nodes have only split
    pairs free is passed over for one that has whole NUMA pairs."""
    gpu_nodes = {"gpu": 4, "gpu_memory": "80Gi", "numa_nodes": 2, "cpu": 16}
    data = scenario(
        clusters=[topology_cluster(rack("r1", 2, **gpu_nodes), rack("r2", 2, **gpu_nodes))],
        queues=["q"],
        jobs=[
            {
                **job(
                    "numa",
                    tasks=[
                        {
                            "name": "w",
                            "replicas": 2,
                            "resources": {"cpu": 1, "gpu": 2},
                            "topology": {"gpu": "numa"},
                        }
                    ],
                ),
                "topology": {"required": "rack"},
            }
        ],
    )
    report = simulate_report(data, until=0)
    assert report.state("numa") == "running"
    assert len(racks_of(report, "numa")) == 1
    for placement in report.job("numa")["placements"]:
        assert placement["gpus"] in ([0, 1], [2, 3])


def test_a_level_the_cluster_does_not_declare_is_refused_with_the_reason() -> None:
    data = scenario(
        clusters=[topology_cluster(rack("r1", 2, cpu=4))],
        queues=["q"],
        jobs=[gang("odd", 2, {"required": "nvlink"}, cpu=1)],
    )
    report = simulate_report(data, until=0)
    assert (
        "topology level 'nvlink' is not one of the cluster's (topology: block, rack)"
        in (report.job("odd")["reason"])
    )


def test_required_and_preferred_together_is_an_error_naming_the_field() -> None:
    data = scenario(
        clusters=[topology_cluster(rack("r1", 2))],
        queues=["q"],
        jobs=[gang("both", 2, {"required": "rack", "preferred": "block"})],
    )
    with pytest.raises(SpecError, match="topology"):
        load(data)


def test_preferred_that_no_domain_holds_goes_to_the_fewest_the_last_the_tightest() -> None:
    """16 cpu fit no rack: r1 (12 free, the most) is taken first, then the tightest rack
    that holds the other 4, r3, so r2 stays whole (Kueue TAS's greedy rule). Placed as if
    unconstrained, the job took r1 and then r2, the next nodes declared."""
    data = scenario(
        clusters=[
            topology_cluster(rack("r1", 3, cpu=4), rack("r2", 2, cpu=4), rack("r3", 1, cpu=4))
        ],
        queues=["q"],
        jobs=[gang("wide", 4, {"preferred": "rack"}, cpu=4)],
    )
    report = simulate_report(data, until=0)
    assert report.state("wide") == "running"
    assert racks_of(report, "wide") == {"b1-r1", "b1-r3"}


def test_preferred_takes_the_fewest_domains_that_hold_the_job() -> None:
    """Ten 1-cpu replicas fit no rack (free: r3 2, r4 2, r2 5, r1 6). The fewest racks that
    hold them are two: r1, the most free, then r2 for the other 4. Starting from the racks
    with the least free (r3, r4, then r1 for the rest) takes three; placed as if
    unconstrained, the job took the nodes as declared: all four racks."""
    data = scenario(
        clusters=[
            topology_cluster(
                rack("r3", 2, cpu=1),
                rack("r4", 2, cpu=1),
                rack("r2", 5, cpu=1),
                rack("r1", 6, cpu=1),
            )
        ],
        queues=["q"],
        jobs=[gang("wide", 10, {"preferred": "rack"}, cpu=1)],
    )
    report = simulate_report(data, until=0)
    assert report.state("wide") == "running"
    assert racks_of(report, "wide") == {"b1-r1", "b1-r2"}


def test_preferred_across_domains_keeps_the_gpu_scopes_inside_a_node() -> None:
    """Five replicas of 2 GPUs on one NUMA node fit no rack. r2 (8 free GPUs) is taken
    first, then the tightest rack that holds the last 2: r1, whose node has one GPU used and
    one whole NUMA pair left. Every replica's GPUs are one NUMA pair. Placed as if
    unconstrained, the replicas filled r1's pair, then r3 (declared before r2), then r2:
    three racks."""
    gpu_nodes = {"gpu": 4, "gpu_memory": "80Gi", "numa_nodes": 2, "cpu": 16}
    data = scenario(
        clusters=[
            topology_cluster(
                rack("r1", 1, **gpu_nodes), rack("r3", 1, **gpu_nodes), rack("r2", 2, **gpu_nodes)
            )
        ],
        queues=["q"],
        jobs=[
            job("one", cpu=1, gpu=1, node_affinity={"rack": "r1"}),
            {
                **job(
                    "numa",
                    submit_at=1,
                    tasks=[
                        {
                            "name": "w",
                            "replicas": 5,
                            "resources": {"cpu": 1, "gpu": 2},
                            "topology": {"gpu": "numa"},
                        }
                    ],
                ),
                "topology": {"preferred": "rack"},
            },
        ],
    )
    report = simulate_report(data, until=1)
    assert report.state("numa") == "running"
    assert racks_of(report, "numa") == {"b1-r1", "b1-r2"}
    for placement in report.job("numa")["placements"]:
        assert placement["gpus"] in ([0, 1], [2, 3])


def test_preferred_widens_one_domain_at_a_time_before_going_anywhere() -> None:
    """Three 4-cpu replicas fit no rack. By summed free cpu r1 (8) and then r3 (4, the
    tightest that holds the rest) would do, but r3's free cpu is split over two 2-cpu nodes;
    so r2 is added (its nodes are too small too), then r4, and the job runs in r1 and r4 —
    never on x, the node in no rack that a placement as if unconstrained takes first."""
    data = scenario(
        clusters=[
            topology_cluster(
                nodes(1, name="x", cpu=4),
                rack("r1", 2, cpu=4),
                rack("r2", 2, cpu=3),
                rack("r3", 2, cpu=2),
                rack("r4", 1, cpu=4),
            )
        ],
        queues=["q"],
        jobs=[gang("wide", 3, {"preferred": "rack"}, cpu=4)],
    )
    report = simulate_report(data, until=0)
    assert report.state("wide") == "running"
    assert racks_of(report, "wide") == {"b1-r1", "b1-r4"}
