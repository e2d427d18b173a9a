"""Preemption that saves work (issue 28): ``min_runtime`` protects a young run, victims of one
priority are taken by least GPU time since their last checkpoint, and the simulator reports
the work lost per queue."""

from __future__ import annotations

from typing import Any

import pytest

from flotilla.model import SpecError
from tests.builders import Data, cluster, job, load, nodes, scenario, simulate_report

PREEMPTION = {"priority_preemption": True}


def gpu_job(name: str, gpus: int, **kwargs: Any) -> Data:
    more = {
        key: kwargs.pop(key)
        for key in ("checkpoint_every", "min_runtime", "preemption")
        if key in kwargs
    }
    return {**job(name, gpu=gpus, duration=1000, **kwargs), **more}


def fleet(*jobs: Data) -> Data:
    data = scenario(
        clusters=[cluster("c", nodes(1, cpu=16, memory="64Gi", gpu=8, gpu_memory="80Gi"))],
        queues=["q"],
        jobs=list(jobs),
    )
    data["settings"] = PREEMPTION
    return data


def test_the_victim_is_the_run_that_loses_the_least_gpu_time() -> None:
    """Two 4-GPU runs: a (started at 0, checkpoints every 100 s) has 50 s unsaved at 250;
    b (started at 10, no checkpoints) 240 s. Youngest-first would take b; a loses less."""
    data = fleet(
        gpu_job("a", 4, checkpoint_every=100),
        gpu_job("b", 4, submit_at=10),
        gpu_job("urgent", 4, submit_at=250, priority=10),
    )
    report = simulate_report(data, until=250)
    assert report.job("a")["preemptions"] == 1
    assert report.state("b") == "running"
    assert report.queue("q")["lost_gpu_seconds"] == 4 * 50
    assert report.raw["summary"]["lost_gpu_seconds"] == 200


def test_gpu_count_weighs_the_loss() -> None:
    """Without checkpoints: a 2-GPU run 100 s old loses 200 GPU-s, a 6-GPU run 50 s old 300:
    the older, smaller one goes (youngest-first would have taken the 6-GPU one)."""
    data = fleet(
        gpu_job("small", 2),
        gpu_job("big", 6, submit_at=50),
        gpu_job("urgent", 2, submit_at=100, priority=10),
    )
    report = simulate_report(data, until=100)
    assert report.job("small")["preemptions"] == 1
    assert report.state("big") == "running"


def test_min_runtime_protects_a_run_until_its_time_is_up() -> None:
    data = fleet(
        gpu_job("young", 8, min_runtime=300),
        gpu_job("urgent", 8, submit_at=100, priority=10),
    )
    assert simulate_report(data, until=299).state("urgent") == "queued"
    report = simulate_report(data, until=300)
    assert report.state("urgent") == "running"
    assert report.job("young")["preemptions"] == 1


def test_a_bad_signal_name_is_an_error_naming_the_field() -> None:
    data = fleet(gpu_job("a", 1, preemption={"grace": 30, "signal": "SIGNOPE"}))
    with pytest.raises(SpecError, match="signal"):
        load(data)
