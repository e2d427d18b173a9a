"""Placing a job replica by replica with rollback; profiles and entry-point loading."""

from __future__ import annotations

import numpy as np
import pytest

from flotilla.framework.interfaces import CycleState
from flotilla.framework.registry import (
    Framework,
    UnknownExtension,
    load_strategy,
    profile_plugin_names,
)
from flotilla.scheduler.placement import place_job
from tests.builders import cluster, fleet, job, nodes, scenario, task

CYCLE = CycleState(time=0)


def test_a_job_that_cannot_place_every_replica_holds_nothing() -> None:
    f = fleet(
        scenario(
            clusters=[cluster("c", nodes(2, cpu=4, gpu=2))],
            jobs=[job(tasks=[task("w", replicas=3, cpu=4, gpu=1)])],
        )
    )
    c = f.cluster()
    decision = place_job(Framework.from_profile(), f.job("j"), c, CYCLE, keep=True)
    assert not decision.found
    assert decision.reason.startswith("c: only 2 of 3 replicas placeable; no node fits w")
    assert not c.nodes.allocated.any()
    assert (c.nodes.device_free == 1.0).all()


def test_placing_without_keep_only_says_where_it_would_go() -> None:
    f = fleet(scenario(clusters=[cluster("c", nodes(2, cpu=4))], jobs=[job(replicas=2, cpu=3)]))
    c = f.cluster()
    decision = place_job(Framework.from_profile(), f.job("j"), c, CYCLE, keep=False)
    assert decision.assignment is not None
    assert decision.assignment.nodes == ["n-0", "n-1"]
    assert not c.nodes.allocated.any()


def test_placing_with_keep_allocates_on_the_cluster() -> None:
    f = fleet(scenario(clusters=[cluster("c", nodes(2, cpu=4))], jobs=[job(replicas=2, cpu=3)]))
    c = f.cluster()
    place_job(Framework.from_profile(), f.job("j"), c, CYCLE, keep=True)
    assert c.nodes.allocated[:, 0].tolist() == [3.0, 3.0]


def test_a_snapshot_does_not_share_allocations() -> None:
    f = fleet(scenario(clusters=[cluster("c", nodes(1, cpu=4))], jobs=[job(cpu=1)]))
    original = f.cluster()
    copy = original.snapshot()
    copy.nodes.allocate(0, f.job("j").total, None)
    assert not original.nodes.allocated.any()
    assert np.array_equal(copy.nodes.capacity, original.nodes.capacity)


def test_default_profile_packs_gpus_and_spread_profile_spreads() -> None:
    default, spread = profile_plugin_names("default"), profile_plugin_names("spread")
    # gpu-fragmentation is exactly binpack on clusters without GPUs.
    assert "gpu-fragmentation" in default and "spread" not in default
    assert profile_plugin_names("binpack")[-2] == "binpack"
    assert "spread" in spread and "binpack" not in spread and "gpu-fragmentation" not in spread


def test_profiles_can_disable_and_enable_plugins() -> None:
    names = profile_plugin_names("default", enabled=["spread"], disabled=["gpu-fragmentation"])
    assert "gpu-fragmentation" not in names and names[-1] == "spread"


def test_builtin_plugins_and_strategies_load_by_entry_point() -> None:
    framework = Framework.from_profile()
    assert framework.queue_sort.name == "priority-sort"
    assert [p.name for p in framework.filters] == [
        "resources-fit",
        "node-affinity",
        "taint-toleration",
        "gpu-devices",
    ]
    for name in ("cluster-only", "resource-aware", "cost-optimized"):
        assert load_strategy(name).name == name


def test_unknown_names_say_what_is_known() -> None:
    with pytest.raises(UnknownExtension, match="known: cluster-only, cost-optimized"):
        load_strategy("moon")
    with pytest.raises(UnknownExtension, match="unknown profile 'fast'"):
        profile_plugin_names("fast")
