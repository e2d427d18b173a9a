"""The elastic quota tree: guarantees, pools, admission along the path, runtime quota."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from flotilla.framework.quota import QuotaTree, QuotaUsage, _water_fill
from flotilla.framework.resources import ResourceSpace, Vector
from flotilla.model import QuotaSpec

SPACE = ResourceSpace(["cpu", "memory", "gpu"])
INF = float("inf")


def tree(*specs: dict[str, Any]) -> QuotaTree:
    return QuotaTree([QuotaSpec.model_validate(spec) for spec in specs], SPACE)


def cpu(amount: float, gpu: float = 0) -> Vector:
    return SPACE.vector({"cpu": amount, "gpu": gpu})


def row(quotas: QuotaTree, matrix: Any, name: str) -> dict[str, float]:
    values = matrix[quotas.index[name]]
    return {resource: float(values[SPACE.index[resource]]) for resource in ("cpu", "gpu")}


def cohort(**a: Any) -> QuotaTree:
    """Cohort ``c`` (no max) over ``a`` (given fields) and ``b`` (min 4 cpu, max 12 cpu)."""
    return tree(
        {
            "name": "c",
            "children": [
                {"name": "a", **a},
                {"name": "b", "min": {"cpu": 4}, "max": {"cpu": 12}},
            ],
        }
    )


# --- the static tree --------------------------------------------------------------------------


def test_a_node_is_guaranteed_its_own_min_plus_its_childrens() -> None:
    quotas = tree(
        {
            "name": "org",
            "min": {"cpu": 2},
            "children": [
                {"name": "a", "min": {"cpu": 4, "gpu": 1}},
                {"name": "b", "min": {"cpu": 6}},
            ],
        }
    )
    assert row(quotas, quotas.guaranteed, "org") == {"cpu": 12, "gpu": 1}
    assert row(quotas, quotas.guaranteed, "a") == {"cpu": 4, "gpu": 1}


def test_the_pool_is_the_max_where_set_else_the_guarantee() -> None:
    quotas = tree(
        {
            "name": "org",
            "max": {"cpu": 20},
            "children": [{"name": "a", "min": {"cpu": 4, "gpu": 2}, "max": {"gpu": 3}}],
        }
    )
    assert row(quotas, quotas.pool, "org") == {"cpu": 20, "gpu": 2}
    assert row(quotas, quotas.pool, "a") == {"cpu": 4, "gpu": 3}


def test_a_resource_named_nowhere_in_a_subtree_is_unbounded_there() -> None:
    quotas = tree({"name": "org", "children": [{"name": "a", "min": {"cpu": 4}}, {"name": "b"}]})
    assert row(quotas, quotas.pool, "org") == {"cpu": 4, "gpu": INF}
    assert row(quotas, quotas.pool, "b") == {"cpu": INF, "gpu": INF}
    usage = quotas.usage()
    assert usage.admit(quotas.index["b"], SPACE.vector({"gpu": 100}), use_runtime=True).ok


def test_lending_limit_keeps_the_rest_of_the_guarantee() -> None:
    quotas = cohort(min={"cpu": 10}, lending_limit={"cpu": 4})
    assert row(quotas, quotas.kept, "a") == {"cpu": 6, "gpu": 0}
    assert row(quotas, quotas.kept, "b") == {"cpu": 0, "gpu": 0}  # no limit: lends it all


# --- admission ------------------------------------------------------------------------------


def test_admission_stops_at_the_max_with_the_usage_in_the_reason() -> None:
    quotas = tree({"name": "a", "max": {"cpu": 12}})
    usage = quotas.usage()
    usage.add(0, cpu(12))
    verdict = usage.admit(0, cpu(1), use_runtime=False)
    assert not verdict.ok
    assert not verdict.soft
    assert verdict.reason == "quota a at max for cpu (12/12)"
    assert usage.admit(0, SPACE.vector({"memory": 2**30}), use_runtime=False).ok


def test_admission_checks_every_ancestor_on_the_path() -> None:
    quotas = tree(
        {"name": "org", "max": {"cpu": 8}, "children": [{"name": "a", "max": {"cpu": 100}}]}
    )
    usage = quotas.usage()
    usage.add(quotas.index["a"], cpu(6))
    assert usage.admit(quotas.index["a"], cpu(2), use_runtime=False).ok
    verdict = usage.admit(quotas.index["a"], cpu(3), use_runtime=False)
    assert not verdict.ok
    # The parent's pool (its max) is checked for the child, before org's own ceiling.
    assert verdict.reason is not None
    assert verdict.reason.startswith("quota a cannot borrow more cpu: org's pool is in use")


def test_a_root_without_max_is_bounded_by_its_pool() -> None:
    quotas = tree({"name": "org", "min": {"cpu": 2}, "children": [{"name": "a"}]})
    usage = quotas.usage()
    verdict = usage.admit(quotas.index["org"], cpu(3), use_runtime=False)
    assert verdict.reason == "quota org at pool for cpu (0/2)"


def test_a_child_borrows_what_its_siblings_leave_unused_up_to_its_own_max() -> None:
    quotas = cohort(min={"cpu": 4}, max={"cpu": 12})
    usage = quotas.usage()
    a = quotas.index["a"]
    assert usage.admit(a, cpu(8), use_runtime=False).ok  # pool 8: all of b's guarantee
    verdict = usage.admit(a, cpu(9), use_runtime=False)
    assert verdict.reason == (
        "quota a cannot borrow more cpu: c's pool is in use or kept by its siblings"
    )
    usage.add(quotas.index["b"], cpu(3))
    assert usage.admit(a, cpu(5), use_runtime=False).ok
    assert not usage.admit(a, cpu(6), use_runtime=False).ok


def test_a_lending_limit_caps_what_siblings_can_borrow() -> None:
    quotas = cohort(min={"cpu": 10}, lending_limit={"cpu": 4})
    usage = quotas.usage()
    b = quotas.index["b"]
    assert usage.admit(b, cpu(8), use_runtime=False).ok  # b's 4 + the 4 a lends
    verdict = usage.admit(b, cpu(9), use_runtime=False)
    assert verdict.reason == "quota b cannot borrow more cpu: c's pool is in use or kept by a"


def test_a_node_below_its_guarantee_waits_for_what_it_lent() -> None:
    quotas = cohort(min={"cpu": 4})
    usage = quotas.usage()
    usage.add(quotas.index["b"], cpu(6))  # b borrows 2 of a's guarantee
    a = quotas.index["a"]
    assert usage.admit(a, cpu(2), use_runtime=False).ok
    verdict = usage.admit(a, cpu(3), use_runtime=False)
    assert verdict.reason == (
        "quota a's guaranteed cpu is lent to b: waiting for it to be reclaimed"
    )


def test_within_guarantee_and_borrowed_count_only_bounded_resources() -> None:
    quotas = cohort(min={"cpu": 4})
    usage = quotas.usage()
    a = quotas.index["a"]
    usage.add(a, cpu(3, gpu=5))  # gpu is not bounded anywhere in the tree
    assert usage.within_guarantee(a, cpu(1, gpu=3))
    assert not usage.within_guarantee(a, cpu(2))
    assert not usage.borrowing(a)
    usage.add(a, cpu(3))
    assert usage.borrowing(a)
    np.testing.assert_allclose(usage.borrowed(a), cpu(2))


def test_removing_usage_never_goes_below_zero() -> None:
    quotas = cohort(min={"cpu": 4})
    usage = quotas.usage()
    a = quotas.index["a"]
    usage.add(a, cpu(1))
    usage.remove(a, cpu(1.5))
    assert row(quotas, usage.used, "a") == {"cpu": 0, "gpu": 0}
    assert row(quotas, usage.used, "c") == {"cpu": 0, "gpu": 0}


# --- runtime quota --------------------------------------------------------------------------


def weighted(weight_a: float, weight_b: float, *, min_cpu: float = 6) -> QuotaTree:
    return tree(
        {
            "name": "c",
            "max": {"cpu": 30},
            "children": [
                {"name": "a", "min": {"cpu": min_cpu}, "max": {"cpu": 30}, "weight": weight_a},
                {"name": "b", "min": {"cpu": min_cpu}, "max": {"cpu": 30}, "weight": weight_b},
            ],
        }
    )


def runtime(quotas: QuotaTree, demand: dict[str, float]) -> QuotaUsage:
    usage = quotas.usage()
    matrix = np.zeros_like(quotas.minimum)
    for name, amount in demand.items():
        for step in quotas.paths[quotas.index[name]]:
            matrix[step] += cpu(amount)
    usage.compute_runtime(matrix)
    return usage


def test_spare_quota_is_split_by_weight_after_the_guarantees() -> None:
    usage = runtime(weighted(2, 1), {"a": 40, "b": 40})
    assert row(usage.tree, usage.runtime, "a")["cpu"] == pytest.approx(18)
    assert row(usage.tree, usage.runtime, "b")["cpu"] == pytest.approx(12)
    assert row(usage.tree, usage.runtime, "c")["cpu"] == pytest.approx(30)


def test_a_child_gets_no_more_than_its_demand_and_the_rest_goes_to_the_others() -> None:
    usage = runtime(weighted(2, 1), {"a": 8, "b": 40})
    assert row(usage.tree, usage.runtime, "a")["cpu"] == pytest.approx(8)
    assert row(usage.tree, usage.runtime, "b")["cpu"] == pytest.approx(22)


def test_a_child_below_its_guarantee_keeps_only_what_it_needs() -> None:
    usage = runtime(weighted(1, 1), {"a": 2, "b": 40})
    assert row(usage.tree, usage.runtime, "a")["cpu"] == pytest.approx(2)
    assert row(usage.tree, usage.runtime, "b")["cpu"] == pytest.approx(28)


def test_water_filling_redistributes_what_a_capped_child_cannot_take() -> None:
    result = _water_fill(
        available=np.array([12.0]),
        wanted=np.array([[1.0], [20.0], [20.0]]),
        guaranteed=np.zeros((3, 1)),
        weight=np.array([4.0, 1.0, 1.0]),
    )
    # a would get 8 by weight but wants 1; b and c split the other 11 equally.
    np.testing.assert_allclose(result[:, 0], [1.0, 5.5, 5.5])


def test_runtime_quota_refuses_softly_only_above_the_guarantee() -> None:
    quotas = weighted(2, 1)
    usage = runtime(quotas, {"a": 40, "b": 40})
    b = quotas.index["b"]
    usage.add(b, cpu(12))
    verdict = usage.admit(b, cpu(1), use_runtime=True)
    assert not verdict.ok
    assert verdict.soft
    assert verdict.reason == (
        "quota b is at its runtime quota for cpu (12/12): spare quota is shared with its "
        "siblings by weight"
    )
    assert usage.admit(b, cpu(1), use_runtime=False).ok  # the leftover pass lifts it


def test_runtime_quota_never_refuses_within_the_guarantee() -> None:
    quotas = weighted(1, 1, min_cpu=6)
    usage = quotas.usage()
    usage.compute_runtime(np.zeros_like(quotas.minimum))  # nobody asked: runtime 0 everywhere
    assert usage.admit(quotas.index["a"], cpu(6), use_runtime=True).ok
    assert not usage.admit(quotas.index["a"], cpu(7), use_runtime=True).ok
