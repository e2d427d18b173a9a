"""The report's content: placements, queues' allocation and shares, summary figures."""

from __future__ import annotations

import pytest

from tests.builders import cluster, job, jobs, node, nodes, scenario, simulate_report, task


def test_placements_name_task_replica_node_and_gpu_ids() -> None:
    data = scenario(
        clusters=[cluster("c", node("head-node", cpu=4), nodes(2, name="gpu", cpu=8, gpu=2))],
        jobs=[
            job(
                "ray",
                tasks=[task("head", cpu=4), task("worker", replicas=2, cpu=8, gpu=2)],
                node_affinity=None,
            )
        ],
    )
    report = simulate_report(data)
    assert report.job("ray")["placements"] == [
        {"task": "head", "replica": 0, "node": "head-node", "gpus": []},
        {"task": "worker", "replica": 0, "node": "gpu-0", "gpus": [0, 1]},
        {"task": "worker", "replica": 1, "node": "gpu-1", "gpus": [0, 1]},
    ]
    scheduled = report.events("ray", "scheduled")[0]
    assert scheduled["nodes"] == ["head-node", "gpu-0", "gpu-1"]


def test_binpack_puts_replicas_on_the_fullest_node_that_fits() -> None:
    data = scenario(
        clusters=[cluster("c", nodes(3, cpu=4))],
        jobs=[job("first", cpu=1), job("second", cpu=1), job("third", cpu=3)],
    )
    report = simulate_report(data)
    assert report.nodes_of("first") == ["n-0"]
    assert report.nodes_of("second") == ["n-0"]  # fuller than n-1, n-2
    assert report.nodes_of("third") == ["n-1"]  # n-0 has only 2 left


def test_spread_profile_puts_replicas_on_the_emptiest_node() -> None:
    data = scenario(
        clusters=[cluster("c", nodes(3, cpu=4))],
        jobs=[job("first", cpu=1), job("second", cpu=1)],
        settings={"plugins": {"profile": "spread"}},
    )
    report = simulate_report(data)
    assert report.nodes_of("second") == ["n-1"]


def test_a_finished_job_keeps_the_cluster_and_placements_of_its_last_run() -> None:
    """The contract's example shows a succeeded job with its placements."""
    data = scenario(clusters=[cluster("c", nodes(1, cpu=4, gpu=1))], jobs=[job(gpu=1, duration=5)])
    report = simulate_report(data)
    assert report.state("j") == "succeeded"
    assert report.cluster_of("j") == "c"
    assert report.job("j")["placements"] == [
        {"task": "main", "replica": 0, "node": "n-0", "gpus": [0]}
    ]


def test_queues_report_allocation_and_dominant_share_of_running_jobs() -> None:
    data = scenario(
        clusters=[cluster("c", node("n", cpu=10, memory="100Gi"))],
        queues=["a", "b"],
        jobs=[jobs("a", n=2, queue="a", cpu=1, memory="25Gi"), job("b", queue="b", cpu=3)],
    )
    report = simulate_report(data)
    assert report.queue("a")["allocated"] == {"cpu": 2, "memory": 50 * 2**30}
    assert report.queue("a")["dominant_share"] == 0.5
    assert report.queue("b")["dominant_share"] == 0.3


def test_summary_counts_jobs_scheduled_and_mean_wait() -> None:
    data = scenario(clusters=[cluster("c", nodes(1, cpu=1))], jobs=[jobs(n=3, duration=10)])
    summary = simulate_report(data).raw["summary"]
    assert summary["jobs"] == 3
    assert summary["scheduled"] == 3
    assert summary["mean_wait"] == pytest.approx((0 + 10 + 20) / 3)
    assert summary["utilization"] == {"cpu": 1.0}
    assert summary["cycles"] == 31


def test_priority_class_sets_priority() -> None:
    data = scenario(
        clusters=[cluster("c", nodes(1, cpu=1))],
        jobs=[
            job("blocker", duration=5),
            job("low", duration=5, submit_at=1),
            {**job("vip", duration=5, submit_at=1), "priority_class": "high"},
        ],
        priority_classes=[{"name": "high", "value": 100}],
    )
    report = simulate_report(data)
    assert report.job("vip")["priority"] == 100
    assert report.job("vip")["started_at"] == 5
    assert report.job("low")["started_at"] == 10
