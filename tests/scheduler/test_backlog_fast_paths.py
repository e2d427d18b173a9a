"""The backlog fast paths decide exactly as the slow paths they replace.

* a snapshot carrying the backlog grouped and ordered per queue (``SchedulingSnapshot.backlog``,
  kept by the simulator's ``Backlog``) gives the same result as one the round groups and sorts;
* the chunked skip of alike jobs (``_slice_end``) ends slices where the per-job loop it replaced
  did;
* ``PendingReasons`` is the dictionary that setting each reason in turn would build.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.snapshot import BacklogSlice, PendingReasons
from flotilla.model import scenario_from_data
from flotilla.model.job import GangSpec
from flotilla.plugins.priority_sort import PrioritySort
from flotilla.scheduler.ordering import _slice_end, sort_queues
from flotilla.scheduler.types import CycleResult, SchedulingSnapshot
from flotilla.sim.backlog import Backlog
from flotilla.sim.simulator import Simulator
from tests.properties.test_policies import scenarios

KEYS: tuple[tuple[object, ...], ...] = (("small",), ("large",), ("gpu", 1))
GANG = GangSpec(name="g")


def make_job(index: int, queue: str, priority: int, key: int, gang: bool, submit: float) -> Any:
    # An equal key that is a different object: identity alone must not decide a slice.
    placement_key = KEYS[key] if index % 3 else tuple(KEYS[key])
    return SchedulingJob(
        name=f"j{index}",
        queue=queue,
        priority=priority,
        preemptible=True,
        submit_time=submit,
        sequence=index,
        tasks=(),
        total=np.zeros(1),
        gang=GANG if gang else None,
        placement_key=placement_key,
    )


@st.composite
def job_lists(draw: st.DrawFn) -> list[SchedulingJob]:
    count = draw(st.integers(0, 60))
    return [
        make_job(
            index,
            queue=draw(st.sampled_from(["a", "b"])),
            priority=draw(st.sampled_from([0, 0, 0, 5])),
            key=draw(st.sampled_from([0, 0, 0, 1, 2])),
            gang=draw(st.booleans()) and draw(st.booleans()) and draw(st.booleans()),
            submit=float(draw(st.integers(0, 5))),
        )
        for index in range(count)
    ]


def slice_end_reference(
    jobs: Sequence[SchedulingJob],
    start: int,
    model: SchedulingJob,
    same: Callable[[SchedulingJob], bool] | None,
) -> int:
    """The per-job loop ``_slice_end`` replaced."""
    key, priority, queue = model.placement_key, model.priority, model.queue
    end = start
    while end < len(jobs):
        other = jobs[end]
        if (
            other.priority != priority
            or other.gang is not None
            or other.queue != queue
            or (other.placement_key is not key and other.placement_key != key)
            or (same is not None and not same(other))
        ):
            break
        end += 1
    return end


@settings(max_examples=300, deadline=None)
@given(job_lists(), st.data())
def test_chunked_slice_skip_ends_where_the_per_job_loop_did(
    jobs: list[SchedulingJob], data: st.DataObject
) -> None:
    models = [job for job in jobs if job.gang is None]
    if not models:
        return
    model = data.draw(st.sampled_from(models))
    start = data.draw(st.integers(0, len(jobs)))
    refused = data.draw(st.sets(st.sampled_from([job.name for job in jobs])))
    for same in (None, lambda job: job.name not in refused):
        assert _slice_end(jobs, start, model, same) == slice_end_reference(jobs, start, model, same)


@settings(max_examples=300, deadline=None)
@given(job_lists(), st.data())
def test_pending_reasons_equal_the_dictionary_built_one_reason_at_a_time(
    jobs: list[SchedulingJob], data: st.DataObject
) -> None:
    reasons = PendingReasons()
    expected: dict[str, str] = {}
    for step in range(data.draw(st.integers(0, 8))):
        reason = f"reason {step}"
        if data.draw(st.booleans()) and jobs:
            start = data.draw(st.integers(0, len(jobs)))
            end = data.draw(st.integers(start, len(jobs)))
            reasons.set_slice(BacklogSlice(tuple(jobs), start, end), reason)
            expected.update((job.name, reason) for job in jobs[start:end])
        else:
            name = data.draw(st.sampled_from(["x", "y", *(job.name for job in jobs[:3])]))
            reasons.set(name, reason)
            expected[name] = reason
        # Read between writes too: a read must not freeze what later writes change.
        if data.draw(st.booleans()):
            assert dict(reasons) == expected
    assert list(reasons.items()) == list(expected.items())
    applied: dict[str, str] = {}
    for name, reason in reasons.writes():
        applied[name] = reason
    assert list(applied.items()) == list(expected.items())
    assert len(reasons) == len(expected)
    assert reasons == expected
    for name in ("x", "y", *(job.name for job in jobs)):
        assert (name in reasons) == (name in expected)
        assert reasons.get(name) == expected.get(name)


@settings(max_examples=200, deadline=None)
@given(job_lists(), st.data())
def test_backlog_keeps_each_queue_in_priority_sort_order(
    jobs: list[SchedulingJob], data: st.DataObject
) -> None:
    backlog = Backlog(["a", "b"])
    held: dict[str, SchedulingJob] = {}
    for job in data.draw(st.permutations(jobs)):
        backlog.add(job)
        held[job.name] = job
        if held and data.draw(st.booleans()):
            gone = held.pop(data.draw(st.sampled_from(sorted(held))))
            backlog.remove(gone)
        if data.draw(st.booleans()):
            expected = sort_queues(list(held.values()), [], PrioritySort().sort)
            by_queue = backlog.by_queue()
            assert {name: list(by_queue[name]) for name in expected} == expected
            assert all(not by_queue[name] for name in by_queue if name not in expected)
            assert list(backlog.queued()) == list(held.values())


def comparable(result: CycleResult) -> tuple[object, ...]:
    return (
        [(s.job.name, s.assignment, s.reservation) for s in result.scheduled],
        list(result.preempted),
        list(result.pending.items()),
        result.stats.considered,
        result.stats.cache_hits,
    )


class ComparingSimulator(Simulator):
    """Runs every cycle both ways: with the per-queue backlog and with the round sorting."""

    def _snapshot(self, now: float) -> SchedulingSnapshot:
        snapshot = super()._snapshot(now)
        assert snapshot.backlog is not None
        sorted_here = sort_queues(snapshot.queued, self.queues, PrioritySort().sort)
        assert {name: list(jobs) for name, jobs in snapshot.backlog.by_queue.items()} == {
            name: list(jobs) for name, jobs in sorted_here.items()
        }
        slow = self.algorithm.schedule(replace(snapshot, backlog=None))
        fast = self.algorithm.schedule(snapshot)
        assert comparable(fast) == comparable(slow)
        return snapshot


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios())
def test_the_simulator_backlog_decides_as_sorting_every_cycle(data: dict[str, Any]) -> None:
    ComparingSimulator(scenario_from_data(data)).run()
