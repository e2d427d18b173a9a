"""The whole-path quota admission agrees with the step-by-step loop, verdict and reason.

``QuotaUsage.admit`` decides in a few array operations and keeps per-node sibling totals up to
date on every add and remove; ``admit_exact`` walks the path and sums every step's siblings.
Random trees, random charges and refunds, and amounts chosen to land exactly on (or a hair
either side of) a ceiling, a pool, a guarantee or a runtime quota must give the same answer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flotilla.framework.quota import QuotaTree, QuotaUsage
from flotilla.framework.resources import EPSILON, ResourceSpace, Vector
from flotilla.model import QuotaSpec

SPACE = ResourceSpace(["cpu", "memory", "gpu"])
RESOURCES = ("cpu", "memory", "gpu")

# Small integers, fractions that do not add up exactly in binary, and large byte counts.
QUANTITIES = st.sampled_from([0, 0.1, 0.2, 0.3, 0.7, 1, 2, 3, 4, 6, 8, 2**30, 3 * 2**30, 1e15])


def resource_lists(draw: st.DrawFn) -> dict[str, float]:
    names = draw(st.lists(st.sampled_from(RESOURCES), unique=True, max_size=3))
    return {name: draw(QUANTITIES) for name in names}


@st.composite
def quota_specs(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": f"q{draw(st.integers(0, 10**9))}"}
    if draw(st.booleans()):
        spec["min"] = resource_lists(draw)
    if draw(st.booleans()):
        # A max below the min is refused (issue 23): raise it to the min where it would be.
        floor = spec.get("min", {})
        spec["max"] = {r: max(v, floor.get(r, 0)) for r, v in resource_lists(draw).items()}
    if draw(st.integers(0, 3)) == 0:
        spec["lending_limit"] = resource_lists(draw)
    spec["weight"] = draw(st.sampled_from([0.5, 1.0, 2.0, 3.0]))
    if depth < 3:
        spec["children"] = draw(st.lists(quota_specs(depth + 1), max_size=4))
    return spec


def build(spec: dict[str, Any]) -> QuotaTree | None:
    names: list[str] = []

    def collect(node: dict[str, Any]) -> None:
        names.append(node["name"])
        for child in node.get("children", []):
            collect(child)

    collect(spec)
    if len(set(names)) != len(names):
        return None
    return QuotaTree([QuotaSpec.model_validate(spec)], SPACE)


def amounts(draw: st.DrawFn) -> Vector:
    return SPACE.vector({name: draw(QUANTITIES) for name in RESOURCES})


def at_a_limit(draw: st.DrawFn, usage: QuotaUsage, node: int) -> Vector:
    """An amount that brings some step of ``node``'s path exactly to one of its limits,
    nudged by nothing, by ε, or by one part in 10¹²."""
    tree = usage.tree
    step = draw(st.sampled_from(tree.paths[node]))
    parent = tree.parent[step]
    targets = [tree.ceiling[step], tree.guaranteed[step], tree.pool[step]]
    targets += [usage.runtime[step], usage.runtime[step]]
    if parent is not None:
        targets.append(tree.pool[parent] - usage.others[step])
    target = draw(st.sampled_from(targets))
    nudge = draw(st.sampled_from([0.0, EPSILON, -EPSILON, 1e-12, -1e-12]))
    with np.errstate(invalid="ignore"):
        wanted = target - usage.used[step]
        wanted = wanted + nudge * np.maximum(np.abs(wanted), 1.0)
        amount = np.where(np.isfinite(wanted) & (wanted > 0), wanted, 0.0)
    for dim in range(len(SPACE)):
        if draw(st.integers(0, 3)) == 0:
            amount[dim] = draw(QUANTITIES)
    return amount


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(st.data())
def test_fast_admission_gives_the_loops_verdict_and_reason(data: st.DataObject) -> None:
    tree = build(data.draw(quota_specs()))
    if tree is None:
        return
    usage = tree.usage()
    nodes = st.integers(0, len(tree) - 1)
    charged: list[tuple[int, Vector]] = []
    for _ in range(data.draw(st.integers(0, 25))):
        choice = data.draw(st.integers(0, 4))
        if charged and choice == 0:
            node, amount = charged.pop(data.draw(st.integers(0, len(charged) - 1)))
            usage.remove(node, amount)
        elif choice == 1:
            usage.reserve(data.draw(nodes), amounts(data.draw))  # a lender's job waits
        else:
            node = data.draw(nodes)
            amount = amounts(data.draw)
            usage.add(node, amount)
            charged.append((node, amount))
    if data.draw(st.integers(0, 3)) > 0:
        demand = usage.used.copy()
        for _ in range(data.draw(st.integers(0, 12))):
            node = data.draw(nodes)
            tree.add_along_paths(
                demand, np.array([node], dtype=np.intp), amounts(data.draw).reshape(1, -1)
            )
        usage.compute_runtime(demand)
    for _ in range(12):
        node = data.draw(nodes)
        amount = at_a_limit(data.draw, usage, node) if data.draw(st.booleans()) else None
        if amount is None:
            amount = amounts(data.draw)
        for use_runtime in (False, True):
            fast = usage.admit(node, amount, use_runtime=use_runtime)
            exact = usage.admit_exact(node, amount, use_runtime=use_runtime)
            assert fast == exact, (node, amount, use_runtime)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.data())
def test_charging_many_at_once_equals_charging_one_by_one(data: st.DataObject) -> None:
    tree = build(data.draw(quota_specs()))
    if tree is None:
        return
    count = data.draw(st.integers(0, 30))
    nodes = np.array(
        [data.draw(st.integers(0, len(tree) - 1)) for _ in range(count)], dtype=np.intp
    )
    matrix = np.array([amounts(data.draw) for _ in range(count)]).reshape(count, len(SPACE))
    one_by_one = tree.usage()
    for node, amount in zip(nodes, matrix, strict=True):
        one_by_one.add(int(node), amount)
    at_once = tree.usage()
    at_once.add_many(nodes, matrix)
    assert np.array_equal(at_once.used, one_by_one.used)
    for node in range(len(tree)):
        amount = amounts(data.draw)
        expected_verdict = one_by_one.admit_exact(node, amount, use_runtime=False)
        assert at_once.admit(node, amount, use_runtime=False) == expected_verdict
    expected = np.zeros_like(tree.minimum)
    for node, amount in zip(nodes, matrix, strict=True):
        for step in tree.paths[int(node)]:
            expected[step] += amount
    assert np.array_equal(at_once.used, expected)
    in_chunks = np.zeros_like(tree.minimum)
    tree.add_along_paths(in_chunks, nodes, matrix, chunk=data.draw(st.integers(1, 7)))
    assert np.array_equal(in_chunks, expected)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.data())
def test_fast_admission_refuses_at_the_runtime_quota_as_the_loop_does(
    data: st.DataObject,
) -> None:
    """A cohort with room to borrow, so the runtime quota (not a hard limit) decides."""
    teams = data.draw(st.integers(2, 5))
    children = [
        {
            "name": f"team-{i}",
            "min": {"cpu": data.draw(QUANTITIES), "gpu": data.draw(QUANTITIES)},
            "weight": data.draw(st.sampled_from([0.5, 1.0, 2.0])),
        }
        for i in range(teams)
    ]
    org = {"name": "org", "max": {"cpu": 1e16, "gpu": 1e16}, "children": children}
    tree = QuotaTree([QuotaSpec.model_validate(org)], SPACE)
    usage = tree.usage()
    for _ in range(data.draw(st.integers(0, 15))):
        usage.add(data.draw(st.integers(1, teams)), amounts(data.draw))
    demand = usage.used.copy()
    for _ in range(data.draw(st.integers(0, 15))):
        node = np.array([data.draw(st.integers(1, teams))], dtype=np.intp)
        tree.add_along_paths(demand, node, amounts(data.draw).reshape(1, -1))
    usage.compute_runtime(demand)
    for node in range(1, teams + 1):
        amount = at_a_limit(data.draw, usage, node)
        for use_runtime in (False, True):
            fast = usage.admit(node, amount, use_runtime=use_runtime)
            assert fast == usage.admit_exact(node, amount, use_runtime=use_runtime)


def test_a_reservation_keeps_the_guarantee_from_siblings_but_not_from_its_own_queue() -> None:
    """Teams a and b are guaranteed 10 cpu each of a 20-cpu cohort. a reserves 6 of its idle
    guarantee: b, using 10, may borrow 4 more but not 5; a may still use all 10 of its own."""
    specs = [
        QuotaSpec.model_validate(
            {
                "name": "cohort",
                "children": [
                    {"name": "a", "min": {"cpu": 10}, "max": {"cpu": 20}},
                    {"name": "b", "min": {"cpu": 10}, "max": {"cpu": 20}},
                ],
            }
        )
    ]
    tree = QuotaTree(specs, SPACE)
    a, b = tree.names.index("a"), tree.names.index("b")
    usage = tree.usage()
    usage.add(b, SPACE.vector({"cpu": 10}))
    reserved = usage.reserve(a, SPACE.vector({"cpu": 6}))
    assert reserved.tolist() == SPACE.vector({"cpu": 6}).tolist()
    for fast in (True, False):
        admit = usage.admit if fast else usage.admit_exact
        assert admit(b, SPACE.vector({"cpu": 4}), use_runtime=False).ok
        refused = admit(b, SPACE.vector({"cpu": 5}), use_runtime=False)
        assert not refused.ok and "kept by a" in (refused.reason or "")
        assert admit(a, SPACE.vector({"cpu": 10}), use_runtime=False).ok
