"""A live export's running jobs keep how long they have run and their reported checkpoint
(issue 28): the what-if protects them by ``min_runtime`` and counts their lost work as the
service does, not as if they had started at t=0."""

from __future__ import annotations

from typing import Any

from tests.builders import Data, cluster, job, nodes, scenario, simulate_report


def gpu_job(name: str, gpus: int, **more: Any) -> Data:
    return {**job(name, gpu=gpus, duration=5000), **more}


def live_entry(name: str, gpus: list[int], elapsed: float, **run: Any) -> Data:
    placement = {"task": "main", "replica": 0, "node": "n-0", "gpus": gpus}
    running = {"cluster": "c", "elapsed": elapsed, "placements": [placement], **run}
    return {"job": name, "id": f"id-{name}", "state": "running", "running": running}


def live_fleet(jobs: list[Data], entries: list[Data]) -> Data:
    data = scenario(
        clusters=[cluster("c", nodes(1, cpu=16, memory="64Gi", gpu=8, gpu_memory="80Gi"))],
        queues=["q"],
        jobs=jobs,
    )
    data["settings"] = {"priority_preemption": True}
    data["live"] = {"jobs": entries}
    return data


def test_a_running_job_past_its_min_runtime_is_a_victim_at_once() -> None:
    data = live_fleet(
        [gpu_job("old", 8, min_runtime=600), gpu_job("urgent", 8, priority=10)],
        [live_entry("old", list(range(8)), elapsed=1000)],
    )
    report = simulate_report(data, until=0)
    assert report.state("urgent") == "running"
    assert report.job("old")["preemptions"] == 1


def test_the_reported_checkpoint_of_a_running_job_picks_the_victim() -> None:
    """Both ran 1000 s on 4 GPUs; a checkpointed 10 s before the export: it loses 40 GPU-s,
    b 4,000. (Counted from t=0, both lose nothing and the later one, b, would go.)"""
    data = live_fleet(
        [gpu_job("a", 4), gpu_job("b", 4), gpu_job("urgent", 4, priority=10)],
        [
            live_entry("a", [0, 1, 2, 3], elapsed=1000, since_checkpoint=10),
            live_entry("b", [4, 5, 6, 7], elapsed=1000),
        ],
    )
    report = simulate_report(data, until=0)
    assert report.job("a")["preemptions"] == 1
    assert report.state("b") == "running"
    assert report.queue("q")["lost_gpu_seconds"] == 4 * 10
