"""Assignment strategies pick the cluster; ``place`` is faked so only the rule is tested."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import Assignment, Decision, SelectionInput
from flotilla.framework.jobs import SchedulingJob
from flotilla.strategies.cluster_only import ClusterOnlyStrategy
from flotilla.strategies.common import hourly_cost, leftover_share
from flotilla.strategies.cost_optimized import CostOptimizedStrategy
from flotilla.strategies.resource_aware import ResourceAwareStrategy
from tests.builders import Fleet, cluster, fleet, job, node, scenario


class FakePlacer:
    """Places on the clusters named ``fits``; records every cluster it was asked about."""

    def __init__(self, fits: Iterable[str]) -> None:
        self.fits = set(fits)
        self.asked: list[str] = []

    def __call__(self, target: Cluster) -> Decision:
        self.asked.append(target.name)
        if target.name in self.fits:
            return Decision(Assignment(target.name, ()), f"placed on {target.name}")
        return Decision(None, f"{target.name}: full")


def three_clusters(**job_kwargs: object) -> Fleet:
    return fleet(
        scenario(
            clusters=[
                cluster("a", node("n", cpu=32), labels={"region": "us"}, cost={"cpu": 0.03}),
                cluster("b", node("n", cpu=8), labels={"region": "eu"}, cost={"cpu": 0.01}),
                cluster(
                    "c",
                    node("n", cpu=16),
                    labels={"region": "eu", "gpu": "yes"},
                    cost={"cpu": 0.02},
                ),
            ],
            jobs=[job(cpu=4, **job_kwargs)],  # type: ignore[arg-type]
        )
    )


def select(
    strategy: object, f: Fleet, fits: Iterable[str], clusters: list[Cluster] | None = None
) -> tuple[Decision, FakePlacer]:
    placer = FakePlacer(fits)
    request = SelectionInput(
        job=f.job("j"), clusters=f.clusters if clusters is None else clusters, place=placer
    )
    return strategy.select(request), placer  # type: ignore[attr-defined]


# --- cluster-only ---------------------------------------------------------------------------


def test_cluster_only_takes_the_first_cluster_and_asks_no_other() -> None:
    decision, placer = select(ClusterOnlyStrategy(), three_clusters(), fits={"a", "b", "c"})
    assert decision.assignment is not None and decision.assignment.cluster == "a"
    assert placer.asked == ["a"]


def test_cluster_only_waits_for_its_cluster_when_another_has_room() -> None:
    decision, placer = select(ClusterOnlyStrategy(), three_clusters(), fits={"b", "c"})
    assert not decision.found
    assert decision.reason == "cluster-only assigns cluster a, which has no room: a: full"
    assert placer.asked == ["a"]


def test_cluster_only_prefers_the_most_preferred_labels() -> None:
    f = three_clusters(preferred_clusters={"region": "eu", "gpu": "yes"})
    decision, _ = select(ClusterOnlyStrategy(), f, fits={"a", "b", "c"})
    assert decision.assignment is not None and decision.assignment.cluster == "c"


@pytest.mark.parametrize(
    "strategy", [ClusterOnlyStrategy(), ResourceAwareStrategy(), CostOptimizedStrategy()]
)
def test_no_candidate_cluster_names_the_required_affinity(strategy: object) -> None:
    f = three_clusters(cluster_affinity={"region": "mars"})
    decision, _ = select(strategy, f, fits=set(), clusters=[])
    assert decision.reason == "no ready cluster matches required cluster affinity region=mars"


# --- resource-aware -------------------------------------------------------------------------


def test_resource_aware_takes_the_tightest_fit_among_clusters_that_fit() -> None:
    f = three_clusters()
    decision, placer = select(ResourceAwareStrategy(), f, fits={"a", "b", "c"})
    assert decision.assignment is not None and decision.assignment.cluster == "b"
    assert placer.asked == ["a", "b", "c"]
    assert decision.reason == "resource-aware best fit: b"


def test_resource_aware_spills_over_when_the_best_fit_is_full() -> None:
    decision, _ = select(ResourceAwareStrategy(), three_clusters(), fits={"a", "c"})
    assert decision.assignment is not None and decision.assignment.cluster == "c"


def test_resource_aware_preferred_labels_come_before_fit() -> None:
    f = three_clusters(preferred_clusters={"region": "us"})
    decision, _ = select(ResourceAwareStrategy(), f, fits={"a", "b", "c"})
    assert decision.assignment is not None and decision.assignment.cluster == "a"


def test_resource_aware_lists_every_cluster_when_none_fits() -> None:
    decision, _ = select(ResourceAwareStrategy(), three_clusters(), fits=set())
    assert decision.reason == "does not fit in any ready cluster now: a: full | b: full | c: full"


def test_leftover_share_is_the_mean_free_share_after_placing() -> None:
    f = three_clusters()
    assert leftover_share(f.job("j"), f.cluster("a")) == pytest.approx(28 / 32)
    assert leftover_share(f.job("j"), f.cluster("b")) == pytest.approx(4 / 8)


def test_equal_fits_go_to_the_cluster_declared_first() -> None:
    f = fleet(
        scenario(
            clusters=[cluster("x", node("n", cpu=8)), cluster("y", node("n", cpu=8))],
            jobs=[job(cpu=4)],
        )
    )
    for strategy in (ResourceAwareStrategy(), CostOptimizedStrategy()):
        decision, _ = select(strategy, f, fits={"x", "y"})
        assert decision.assignment is not None and decision.assignment.cluster == "x"


# --- cost-optimized -------------------------------------------------------------------------


def test_cost_optimized_takes_the_cheapest_cluster_that_fits() -> None:
    decision, _ = select(CostOptimizedStrategy(), three_clusters(), fits={"a", "b", "c"})
    assert decision.assignment is not None and decision.assignment.cluster == "b"
    decision, _ = select(CostOptimizedStrategy(), three_clusters(), fits={"a", "c"})
    assert decision.assignment is not None and decision.assignment.cluster == "c"


def test_cost_optimized_preferred_labels_come_before_price() -> None:
    f = three_clusters(preferred_clusters={"region": "us"})
    decision, _ = select(CostOptimizedStrategy(), f, fits={"a", "b", "c"})
    assert decision.assignment is not None and decision.assignment.cluster == "a"


def test_hourly_cost_prices_memory_per_gib_and_other_resources_by_name() -> None:
    f = fleet(
        scenario(
            clusters=[
                cluster(
                    "c",
                    node("n", cpu=64, memory="512Gi", gpu=8),
                    cost={"cpu": 0.05, "memory_gib": 0.01, "gpu": 2.5},
                )
            ],
            jobs=[job(replicas=2, cpu=4, memory="16Gi", gpu=1)],
        )
    )
    job_: SchedulingJob = f.job("j")
    expected = 2 * (4 * 0.05 + 16 * 0.01 + 1 * 2.5)
    assert hourly_cost(job_, f.cluster(), f.space.names) == pytest.approx(expected)


def test_a_resource_without_a_price_costs_nothing() -> None:
    f = fleet(scenario(clusters=[cluster("c", node("n", cpu=8))], jobs=[job(cpu=4)]))
    assert hourly_cost(f.job("j"), f.cluster(), f.space.names) == 0.0
