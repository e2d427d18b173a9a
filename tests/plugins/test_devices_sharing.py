"""A cluster's ``gpu_sharing``: fractions of different jobs meet on a device only where the
cluster allows it (``shared``), or where both opted in (``none``), never (``exclusive``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from flotilla.framework.jobs import SchedulingJob
from flotilla.plugins.devices import GpuDevices
from tests.builders import Fleet, cluster, fleet, node, scenario
from tests.plugins.helpers import filter_input, reserve_input, rows

PLUGIN = GpuDevices()


def one_gpu(sharing: str | None) -> Fleet:
    """One node with one GPU; jobs ``plain-N`` (no opt-in) and ``opted-N``, half a GPU each."""
    spec: dict[str, Any] = cluster("c", node("g", cpu=16, gpu=1))
    if sharing is not None:
        spec["gpu_sharing"] = sharing
    jobs = [
        {
            "name": f"{kind}-{index}",
            "queue": "q",
            "tasks": [
                {
                    "name": "main",
                    "resources": {"cpu": 1, "gpu": 0.5},
                    "share_gpu": kind == "opted",
                }
            ],
        }
        for kind in ("plain", "opted")
        for index in range(2)
    ]
    return fleet(scenario(clusters=[spec], jobs=jobs))


def place(f: Fleet, job: SchedulingJob) -> float:
    """Reserve and allocate ``job`` on the node; the share of the device it holds."""
    result = PLUGIN.reserve(reserve_input(job, f.cluster(), 0))
    assert result.status.ok and result.gpus is not None
    f.cluster().nodes.allocate(0, job.tasks[0].request, result.gpus)
    [(_, share)] = result.gpus.shares
    return share


def fits(f: Fleet, name: str) -> bool:
    return rows(PLUGIN.filter(filter_input(f.job(name), f.cluster()))) == [0]


def test_shared_is_the_default_and_packs_any_two_halves() -> None:
    f = one_gpu(None)
    assert place(f, f.job("plain-0")) == 0.5
    assert fits(f, "plain-1") and fits(f, "opted-0")


def test_none_gives_a_fraction_that_did_not_opt_in_its_own_device() -> None:
    f = one_gpu("none")
    assert place(f, f.job("plain-0")) == 1.0
    assert not fits(f, "plain-1") and not fits(f, "opted-0")
    why = PLUGIN.explain(filter_input(f.job("plain-1"), f.cluster()), np.array([True]))
    assert why == (
        "1 node with enough GPU in total but no idle GPU (gpu_sharing none: a fraction gets "
        "a GPU to itself)"
    )


def test_none_lets_fractions_that_both_opted_in_share_a_device() -> None:
    f = one_gpu("none")
    assert place(f, f.job("opted-0")) == 0.5
    assert fits(f, "opted-1")
    assert not fits(f, "plain-0")  # it did not opt in: it needs an idle device


def test_exclusive_never_co_locates_even_fractions_that_opted_in() -> None:
    f = one_gpu("exclusive")
    assert place(f, f.job("opted-0")) == 1.0
    assert not fits(f, "opted-1") and not fits(f, "plain-0")


def test_row_filter_agrees_with_filter() -> None:
    for sharing in ("shared", "none", "exclusive"):
        f = one_gpu(sharing)
        place(f, f.job("opted-0"))
        for name in ("plain-1", "opted-1"):
            verdict = PLUGIN.row_filter(filter_input(f.job(name), f.cluster()))
            assert verdict is not None
            assert verdict(0) == fits(f, name), (sharing, name)
