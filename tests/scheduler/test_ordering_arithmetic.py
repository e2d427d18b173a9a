"""DRF shares in Python floats give the order the numpy arithmetic gave.

``DrfOrder`` keeps allocations as lists of floats. The reference below is the earlier numpy
implementation of the same arithmetic; on random fleets, queues, jobs, allocations and
sequences of placements, skips and adjustments both must yield the same jobs in the same
order, and the share function must return the very same float.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.resources import EPSILON, Vector
from flotilla.plugins.priority_sort import PrioritySort
from flotilla.scheduler.ordering import DrfOrder, _dominant, sort_queues
from flotilla.scheduler.types import QueueInfo
from tests.builders import cluster, fleet, jobs, node, scenario

AMOUNTS = st.sampled_from([0.0, 1e-12, 0.1, 0.2, 0.3, 1.0, 3.0, 7.5, 2.0**30, 1e15, -0.1])


class NumpyDrfOrder(DrfOrder):
    """The arithmetic as it was: numpy vectors per queue, a numpy max per share."""

    def __init__(
        self,
        queues: list[QueueInfo],
        jobs_by_queue: dict[str, list[SchedulingJob]],
        allocated: dict[str, Vector],
        total: Vector,
    ) -> None:
        self._vectors = {name: allocated[name].copy() for name in allocated}
        for name in jobs_by_queue:
            self._vectors.setdefault(name, np.zeros_like(total))
        self._inverse = np.divide(1.0, total, out=np.zeros_like(total), where=total > EPSILON)
        super().__init__(queues, jobs_by_queue, allocated, total)

    def share(self, queue: str, extra: Vector | None = None) -> float:
        used = self._vectors.get(queue)
        if used is None:
            used = np.zeros_like(self._inverse)
        if extra is not None:
            used = used + extra
        return float((used * self._inverse).max(initial=0.0)) / self._weights.get(queue, 1.0)

    def _push(self, queue: str) -> None:
        import heapq

        head = self._jobs[queue][self._heads[queue]]
        entry = (self.share(queue, head.total), self._order[queue], self._version[queue], queue)
        heapq.heappush(self._heap, entry)

    def placed(self, job: SchedulingJob) -> None:
        self._vectors[job.queue] = self._vectors[job.queue] + job.total
        self._advance(job.queue)

    def adjust(self, queue: str, delta: Vector) -> None:
        if queue not in self._vectors:
            return
        self._vectors[queue] = self._vectors[queue] + delta
        waiting = queue in self._heads and self._heads[queue] < len(self._jobs[queue])
        if waiting and queue not in self._stopped:
            self._version[queue] += 1
            self._push(queue)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(AMOUNTS, min_size=3, max_size=3),
    st.none() | st.lists(AMOUNTS, min_size=3, max_size=3),
    st.lists(st.sampled_from([0.0, 1.0, 3.0, 1e-10, 64.0, 2.0**40]), min_size=3, max_size=3),
)
def test_the_share_is_the_numpy_share(
    used: list[float], extra: list[float] | None, total: list[float]
) -> None:
    total_vector = np.array(total)
    inverse = np.divide(
        1.0, total_vector, out=np.zeros_like(total_vector), where=total_vector > EPSILON
    )
    vector = np.array(used) + (np.array(extra) if extra is not None else 0.0)
    expected = float((vector * inverse).max(initial=0.0))
    assert _dominant(used, extra, inverse.tolist()) == expected


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.data())
def test_the_order_is_the_numpy_order(data: st.DataObject) -> None:
    queue_count = data.draw(st.integers(1, 4))
    names = [f"q{i}" for i in range(queue_count)]
    groups = [
        jobs(
            name,
            n=data.draw(st.integers(1, 5)),
            queue=name,
            cpu=data.draw(st.sampled_from([0.1, 0.3, 1, 2.5, 4])),
            memory=data.draw(st.sampled_from([None, "1Gi", "3Gi", "0.7Gi"])),
        )
        for name in names
    ]
    built = fleet(
        scenario(
            clusters=[cluster("c", node("n", cpu=16.3, memory="64Gi"))],
            queues=names,
            jobs=groups,
        )
    )
    queues = [
        QueueInfo(name, data.draw(st.sampled_from([0.5, 1.0, 1.5, 3.0])), index)
        for index, name in enumerate(names)
    ]
    size = len(built.space)
    allocated = {name: np.array([data.draw(AMOUNTS) for _ in range(size)]) for name in names[:2]}
    total = built.cluster().total_capacity()
    steps = [data.draw(st.integers(0, 3)) for _ in range(40)]
    deltas = [np.array([data.draw(AMOUNTS) for _ in range(size)]) for _ in range(40)]
    orders = []
    for kind in (DrfOrder, NumpyDrfOrder):
        by_queue = sort_queues(list(built.jobs.values()), queues, PrioritySort().sort)
        order = kind(queues, by_queue, allocated, total)
        seen: list[str] = []
        for step, (choice, delta) in enumerate(zip(steps, deltas, strict=True)):
            job = next(iter(order), None)
            if job is None:
                break
            seen.append(job.name)
            if choice == 0:
                order.skipped(job)
            elif choice == 1:
                order.adjust(names[step % queue_count], delta)
                order.placed(job)
            else:
                order.placed(job)
            seen.append(f"{order.share(job.queue):.17g}")
        orders.append(seen)
    assert orders[0] == orders[1]
