"""Remembered placement failures change nothing: every decision and explanation is the one
a profile that remembers nothing gives, and equal node table versions mean equal content.

Random small fleets go through random sequences of placements (kept, rolled back, non-strict
gangs), releases and copies, with one profile that keeps its failures throughout; each
decision is compared with a fresh profile's on an independent copy of the same table.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flotilla.framework import versions
from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import Placement
from flotilla.framework.nodes import NodeTable
from flotilla.framework.registry import Framework
from flotilla.framework.versions import Version
from flotilla.scheduler import placement
from flotilla.scheduler.caches import EngineCaches
from flotilla.scheduler.failures import FailureCache
from tests.scheduler.test_node_index import (
    CYCLE,
    SPACE,
    _job,
    _node,
    _plain_kind,
    _plain_shape,
    node_kinds,
    shapes,
)

operations = st.lists(
    st.one_of(
        st.tuples(st.just("place"), st.integers(0, 5), st.booleans(), st.sampled_from([None, 1])),
        st.tuples(st.just("release"), st.integers(0, 50), st.just(False), st.just(None)),
        st.tuples(st.just("copy"), st.just(0), st.booleans(), st.just(None)),
    ),
    min_size=1,
    max_size=40,
)


def _content(table: NodeTable) -> bytes:
    """Everything ``allocate``/``release`` change, over the whole table."""
    arrays = (table.allocated, table.free, table.device_free, table.device_memory_free)
    return b"".join(array.tobytes() for array in arrays)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    profile=st.sampled_from(["default", "spread"]),
    content_addressed=st.booleans(),
    kinds=st.lists(node_kinds, min_size=1, max_size=6),
    job_shapes=st.lists(shapes, min_size=6, max_size=6),
    steps=operations,
)
def test_remembered_failures_read_as_fresh_ones(
    profile: str,
    content_addressed: bool,
    kinds: list[dict[str, Any]],
    job_shapes: list[dict[str, Any]],
    steps: list[tuple[str, int, bool, int | None]],
) -> None:
    framework = Framework.from_profile(profile)
    assert framework.row_local
    remembering = EngineCaches(framework)
    # Small tables are named by content, large ones by path: try both on small fleets.
    limit = versions.CONTENT_ADDRESSED_NODES if content_addressed else 0
    with mock.patch.object(versions, "CONTENT_ADDRESSED_NODES", limit):
        table = NodeTable(SPACE, [_node(i, kind) for i, kind in enumerate(kinds)])
    jobs = [_job(i, shape) for i, shape in enumerate(job_shapes)]
    tables = [table]
    held: list[Placement] = []
    contents: dict[Version, bytes] = {table.version: _content(table)}
    for action, number, flag, minimum in steps:
        if action == "place":
            job = jobs[number]
            twin = Cluster(name="c", order=0, labels={}, cost={}, nodes=table.copy())
            expected = placement.place_job(framework, job, twin, CYCLE, keep=flag, minimum=minimum)
            cluster = Cluster(name="c", order=0, labels={}, cost={}, nodes=table)
            decision = placement.place_job(
                framework, job, cluster, CYCLE, keep=flag, minimum=minimum, caches=remembering
            )
            assert decision == expected
            assert _content(table) == _content(twin.nodes)
            if flag and decision.assignment is not None:
                held.extend(decision.assignment.placements)
        elif action == "release" and held:
            done = held.pop(number % len(held))
            table.release(done.row, done.request, done.gpus)
        elif action == "copy":
            # Continue on a copy, or go back to an earlier table (whose placements are then
            # forgotten: releasing them there would release what it never held).
            if flag or len(tables) == 1:
                table = table.copy()
                tables.append(table)
            else:
                table = tables[number % len(tables)]
                held.clear()
        # Equal versions, equal content: whichever table and however it got there.
        assert contents.setdefault(table.version, _content(table)) == _content(table)


def test_the_cache_is_bounded_and_forgets_the_least_recently_used() -> None:
    cache = FailureCache(capacity=2)
    one, two, three = Version(), Version(), Version()
    cache.put((one, ("a",)), ": x")
    cache.put((two, ("b",)), "")
    assert cache.get((one, ("a",))) == ": x"
    cache.put((three, ("c",)), ": z")
    assert len(cache) == 2
    assert cache.get((two, ("b",))) is None
    assert cache.get((one, ("a",))) == ": x"
    assert cache.get((three, ("c",))) == ": z"


def test_a_large_table_takes_a_fresh_version_per_change_and_its_copies_keep_it() -> None:
    with mock.patch.object(versions, "CONTENT_ADDRESSED_NODES", 0):
        table = NodeTable(SPACE, [_node(0, _plain_kind())])
    start = table.version
    copy = table.copy()
    assert copy.version == start
    request = SPACE.vector({"cpu": 1.0})
    table.allocate(0, request, None)
    after = table.version
    table.release(0, request, None)
    assert len({start, after, table.version}) == 3
    assert copy.version == start


def test_a_small_table_is_named_by_its_content_however_it_got_there() -> None:
    table = NodeTable(SPACE, [_node(0, _plain_kind()), _node(1, _plain_kind())])
    one, two = SPACE.vector({"cpu": 1.0}), SPACE.vector({"cpu": 2.0})
    start = table.version
    other = table.copy()
    table.allocate(0, one, None)
    table.allocate(1, two, None)
    other.allocate(1, two, None)
    other.allocate(0, one, None)
    assert table.version == other.version
    table.release(0, one, None)
    table.release(1, two, None)
    assert table.version == start != other.version
    assert other.copy().version == other.version
    assert (
        NodeTable(SPACE, [_node(0, _plain_kind())]).version
        != NodeTable(SPACE, [_node(0, _plain_kind())]).version
    )  # two tables: two static parts, even when alike


def test_a_failure_on_unchanged_content_is_not_filtered_or_explained_again() -> None:
    framework = Framework.from_profile()
    caches = EngineCaches(framework)
    table = NodeTable(SPACE, [_node(0, _plain_kind())])
    too_big = _job(0, dict(_plain_shape(), cpu=16))
    first = placement.place_job(
        framework, too_big, _cluster(table), CYCLE, keep=False, caches=caches
    )
    assert first.assignment is None
    with mock.patch.object(placement, "_details", side_effect=AssertionError("explained")):
        again = placement.place_job(
            framework, too_big, _cluster(table.copy()), CYCLE, keep=False, caches=caches
        )
    assert again == first


def _cluster(table: NodeTable) -> Cluster:
    return Cluster(name="c", order=0, labels={}, cost={}, nodes=table)
