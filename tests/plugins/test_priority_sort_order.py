"""The built-in queue order: ``sort`` (the fast path) equals sorting by ``sort_key``."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.resources import ResourceSpace
from flotilla.plugins.priority_sort import PrioritySort


def _job(priority: int, submit: int, sequence: int) -> SchedulingJob:
    space = ResourceSpace(["cpu"])
    total = space.zeros()
    return SchedulingJob(
        name=f"j{sequence}",
        queue="q",
        priority=priority,
        preemptible=True,
        submit_time=float(submit),
        sequence=sequence,
        tasks=(),
        total=total,
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 5)), max_size=40))
def test_fast_sort_gives_the_sort_key_order(shapes: list[tuple[int, int]]) -> None:
    plugin = PrioritySort()
    jobs = [_job(priority, submit, index) for index, (priority, submit) in enumerate(shapes)]
    fast = list(reversed(jobs))
    plugin.sort(fast)
    assert [j.name for j in fast] == [j.name for j in sorted(jobs, key=plugin.sort_key)]
