"""DRF progressive filling across queues, and global FIFO."""

from __future__ import annotations

import numpy as np
import pytest

from flotilla.framework.jobs import SchedulingJob
from flotilla.plugins.priority_sort import PrioritySort
from flotilla.scheduler.ordering import DrfOrder, FifoOrder, sort_queues
from flotilla.scheduler.types import QueueInfo
from tests.builders import Fleet, cluster, fleet, job, jobs, node, scenario

SORT = PrioritySort().sort


def drf(
    f: Fleet, queues: list[QueueInfo], allocated: dict[str, list[float]] | None = None
) -> DrfOrder:
    queued = list(f.jobs.values())
    by_queue = sort_queues(queued, queues, SORT)
    total = f.cluster().total_capacity()
    alloc = {q.name: np.zeros(len(f.space)) for q in queues}
    for name, amounts in (allocated or {}).items():
        alloc[name] = np.array(amounts + [0.0] * (len(f.space) - len(amounts)))
    return DrfOrder(queues, by_queue, alloc, total)


def take(order: DrfOrder | FifoOrder, count: int, *, place: bool = True) -> list[str]:
    names: list[str] = []
    for j in order:
        names.append(j.name)
        if place:
            order.placed(j)
        else:
            order.skipped(j)
        if len(names) == count:
            break
    return names


def two_queue_fleet(a_cpu: float = 1, b_cpu: float = 1, n: int = 6) -> Fleet:
    return fleet(
        scenario(
            clusters=[cluster("c", node("n", cpu=12, memory="12Gi"))],
            queues=["a", "b"],
            jobs=[jobs("a", n=n, queue="a", cpu=a_cpu), jobs("b", n=n, queue="b", cpu=b_cpu)],
        )
    )


def test_equal_queues_alternate_first_declared_first() -> None:
    order = drf(two_queue_fleet(), [QueueInfo("a", 1, 0), QueueInfo("b", 1, 1)])
    assert take(order, 4) == ["a-0", "b-0", "a-1", "b-1"]


def test_weights_scale_the_share() -> None:
    order = drf(two_queue_fleet(), [QueueInfo("a", 2, 0), QueueInfo("b", 1, 1)])
    # a's k-th job brings it to k/12/2, b's m-th to m/12: a takes two jobs for each of b's,
    # and on equal shares the queue declared first goes first.
    assert [name[0] for name in take(order, 6)] == ["a", "a", "b", "a", "a", "b"]


def test_counting_the_job_makes_big_jobs_wait_for_their_share() -> None:
    f = two_queue_fleet(a_cpu=6, b_cpu=1)
    order = drf(f, [QueueInfo("a", 1, 0), QueueInfo("b", 1, 1)])
    # a's head alone would be 6/12; b runs jobs while its share with the job stays below.
    assert take(order, 7) == ["b-0", "b-1", "b-2", "b-3", "b-4", "a-0", "b-5"]


def test_current_allocation_counts() -> None:
    order = drf(two_queue_fleet(), [QueueInfo("a", 1, 0), QueueInfo("b", 1, 1)], {"a": [3.0]})
    assert take(order, 4) == ["b-0", "b-1", "b-2", "a-0"]


def test_dominant_share_is_the_largest_share_over_resources() -> None:
    f = fleet(
        scenario(
            clusters=[cluster("c", node("n", cpu=10, memory="100Gi"))],
            queues=["a"],
            jobs=[job(queue="a", cpu=1, memory="50Gi")],
        )
    )
    order = drf(f, [QueueInfo("a", 2, 0)])
    assert order.share("a", f.job("j").total) == pytest.approx(0.5 / 2)


def test_a_skipped_job_does_not_count_toward_its_queues_share() -> None:
    order = drf(two_queue_fleet(n=2), [QueueInfo("a", 1, 0), QueueInfo("b", 1, 1)])
    # a-0 stays queued, so a's share is still 0 and its next job ties with b-0: a goes first.
    assert take(order, 4, place=False) == ["a-0", "a-1", "b-0", "b-1"]


def test_blocked_queue_stops_and_returns_the_jobs_behind_its_head() -> None:
    order = drf(two_queue_fleet(n=3), [QueueInfo("a", 1, 0), QueueInfo("b", 1, 1)])
    seen: list[str] = []
    behind: list[SchedulingJob] = []
    for j in order:
        seen.append(j.name)
        if j.queue == "a":
            behind = order.blocked(j)
        else:
            order.placed(j)
    assert seen == ["a-0", "b-0", "b-1", "b-2"]
    assert [j.name for j in behind] == ["a-1", "a-2"]


def test_within_a_queue_priority_orders_jobs() -> None:
    f = fleet(
        scenario(
            clusters=[cluster("c", node("n", cpu=12))],
            queues=["a"],
            jobs=[job("low", queue="a"), job("high", queue="a", priority=5)],
        )
    )
    assert take(drf(f, [QueueInfo("a", 1, 0)]), 2) == ["high", "low"]


def test_fifo_is_global_submission_order_ignoring_queues_and_priority() -> None:
    f = fleet(
        scenario(
            clusters=[cluster("c")],
            queues=["a", "b"],
            jobs=[
                job("b-late", queue="b", submit_at=2, priority=9),
                job("a-first", queue="a", submit_at=0),
                job("b-second", queue="b", submit_at=1),
                job("a-tie", queue="a", submit_at=1),
            ],
        )
    )
    order = FifoOrder(list(f.jobs.values()))
    assert take(order, 4) == ["a-first", "b-second", "a-tie", "b-late"]


def test_fifo_blocked_stops_everything() -> None:
    f = fleet(scenario(clusters=[cluster("c")], jobs=[jobs(n=3)]))
    order = FifoOrder(list(f.jobs.values()))
    head = next(iter(order))
    assert [j.name for j in order.blocked(head)] == ["j-1", "j-2"]
    assert list(order) == []
