"""Preemption waits for its victim (issue 36): the preemptor starts only once the victim's
run has stopped — its ``preemption.grace`` passed — and until then the victim's GPUs stay
allocated and the preemptor's reason names whom it waits for. The work a victim loses counts
from its run's start (after the cluster's ``startup_delay``), not from its scheduling. The
service keeps the same rules (``tests/service/test_preemption_waits.py``)."""

from __future__ import annotations

from typing import Any

from tests.builders import Data, cluster, job, nodes, scenario, simulate_report


def gpu_job(name: str, gpus: int = 8, **more: Any) -> Data:
    return {**job(name, gpu=gpus, duration=5000), **more}


def one_gpu_node(jobs: list[Data], **more: Any) -> Data:
    data = scenario(
        clusters=[cluster("c", nodes(1, cpu=16, memory="64Gi", gpu=8, gpu_memory="80Gi"), **more)],
        jobs=jobs,
    )
    data["settings"] = {"priority_preemption": True}
    return data


def test_a_preemptor_starts_only_after_its_victims_grace() -> None:
    data = one_gpu_node(
        [
            gpu_job("low", preemption={"grace": 60}),
            gpu_job("urgent", priority=10, submit_at=100),
        ]
    )
    report = simulate_report(data, until=130)
    assert report.events("low", "preempted")[0]["time"] == 100
    assert report.state("urgent") == "queued"
    assert report.job("urgent")["reason"] == (
        "waits for job low to stop (preempted to make room for it)"
    )
    assert report.raw["summary"]["utilization"]["gpu"] == 1.0  # its GPUs stay allocated

    report = simulate_report(data)
    assert report.events("low", "stopped")[0]["time"] == 160
    assert report.events("urgent", "scheduled")[0]["time"] == 160


def test_a_victim_without_grace_makes_room_at_once() -> None:
    data = one_gpu_node([gpu_job("low"), gpu_job("urgent", priority=10, submit_at=100)])
    report = simulate_report(data)
    assert report.events("urgent", "scheduled")[0]["time"] == 100
    assert report.events("low", "stopped") == []


def test_lost_work_counts_from_the_runs_start_after_a_startup_delay() -> None:
    """Placed at 0 on a cluster with a 50 s start-up delay, the victim runs from 50 and saves
    its work every 100 s of its run: preempted at 140 it has saved nothing yet and loses
    4 GPUs × 90 s = 360 GPU-s (counted from its scheduling, a checkpoint at 100: 160)."""
    data = one_gpu_node(
        [
            gpu_job("low", 4, checkpoint_every=100),
            gpu_job("kept", 4, preemptible=False),
            gpu_job("urgent", 4, priority=10, submit_at=140),
        ],
        startup_delay=50,
    )
    report = simulate_report(data, until=140)
    assert report.job("low")["preemptions"] == 1
    assert report.queue("q")["lost_gpu_seconds"] == 4 * 90
