"""Fairness inside a queue: the queue's jobs taken owner by owner, by DRF among the owners.

A queue with ``owners: {order: drf}`` does not hand out its jobs in its own order (priority,
then submission) but the way DRF hands out queues (``scheduler/ordering.py``): the next job is
the first one, in the queue's order, of the owner whose weighted dominant share, counting
that job, would be lowest. Inside one owner the queue's order holds. An owner's share is what
its running jobs of this queue hold, plus what the round placed for it, over the fleet's total.
The owners' heap works as the queues' does: only the owner served changes, so a heap keyed on
each owner's cost-with-its-head is exact.

``OwnerMerge`` is that merged order, made one job at a time as ``DrfOrder`` asks for the next
(a ``Sequence`` to it): what the round placed for an owner must be known before the next job
is chosen, so the order cannot be made ahead.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import overload

from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.owners import owner_of
from flotilla.framework.resources import Vector
from flotilla.framework.snapshot import BacklogSlice, SchedulingSnapshot
from flotilla.model.queue import OwnerOrder


def owner_allocations(
    snapshot: SchedulingSnapshot, size: int
) -> dict[str, dict[str, Vector]] | None:
    """For each queue whose owners share it by DRF, what each owner's running jobs of the
    queue hold; ``None`` when no queue does (the common case: nothing is walked)."""
    queues = {
        queue.name
        for queue in snapshot.queues
        if queue.owners is not None and queue.owners.order is OwnerOrder.DRF
    }
    if not queues:
        return None
    held: dict[str, dict[str, Vector]] = {name: {} for name in queues}
    for running in snapshot.running:
        by_owner = held.get(running.job.queue)
        if by_owner is None:
            continue
        owner = owner_of(running.job)
        amount = running.held(size)
        by_owner[owner] = by_owner[owner] + amount if owner in by_owner else amount.copy()
    return held


Dominant = Callable[[list[float], list[float] | None, list[float]], float]


class OwnerMerge(Sequence[SchedulingJob]):
    """One queue's jobs, owner-fair: ``self[i]`` is the i-th job handed out, chosen when first
    asked for. ``charge`` tells it what an owner got meanwhile."""

    def __init__(
        self,
        jobs: Sequence[SchedulingJob],
        weights: Mapping[str, float],
        allocated: Mapping[str, list[float]],
        inverse_total: list[float],
        dominant: Dominant,
    ) -> None:
        self._size = len(jobs)
        self._lists: dict[str, list[SchedulingJob]] = {}
        self._rank: dict[str, list[int]] = {}
        """Owner → the queue-order position of each of its jobs (the tie-breaker)."""
        for position, job in enumerate(jobs):
            owner = owner_of(job)
            self._lists.setdefault(owner, []).append(job)
            self._rank.setdefault(owner, []).append(position)
        self._weights = {owner: weights.get(owner, 1.0) for owner in self._lists}
        zeros = [0.0] * len(inverse_total)
        self._allocated: dict[str, list[float]] = {
            owner: list(allocated.get(owner, zeros)) for owner in self._lists
        }
        for owner, amount in allocated.items():
            self._allocated.setdefault(owner, list(amount))
        self._inverse_total = inverse_total
        self._dominant = dominant
        self._heads = dict.fromkeys(self._lists, 0)
        self._order: list[SchedulingJob] = []
        self._owners: list[str] = []
        """The owner of each job of ``_order``."""
        self._heap: list[tuple[float, int, int, str]] = []
        self._version = dict.fromkeys(self._lists, 0)
        self._out: set[str] = set()
        """Owners served or charged since they were last pushed: pushed again before a pick."""
        for owner in self._lists:
            self._push(owner)

    # --- Sequence -------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> SchedulingJob: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[SchedulingJob]: ...

    def __getitem__(self, index: int | slice) -> SchedulingJob | Sequence[SchedulingJob]:
        if isinstance(index, slice):
            start, stop, _ = index.indices(self._size)
            if start >= len(self._order) and stop == self._size:
                return self.rest()
            return [self[i] for i in range(start, stop)]
        if index < 0:
            index += self._size
        while len(self._order) <= index:
            if not self._pick():
                raise IndexError(index)
        return self._order[index]

    def __iter__(self) -> Iterator[SchedulingJob]:
        for index in range(self._size):
            yield self[index]

    # --- what the round reports -----------------------------------------------------------

    def charge(self, owner: str, delta: list[float]) -> None:
        """``owner``'s holdings in the queue changed by ``delta`` (a placement, a gang member)."""
        used = self._allocated.get(owner)
        if used is None:
            return
        self._allocated[owner] = [a + b for a, b in zip(used, delta, strict=True)]
        if owner in self._heads:
            self._out.add(owner)

    def skip_alike(
        self,
        index: int,
        slice_end: Callable[[Sequence[SchedulingJob], int], int],
    ) -> BacklogSlice:
        """Skip the jobs right behind ``self[index]`` in its owner's list for which
        ``slice_end`` says they would fail alike; returns them."""
        owner = self._owners[index]
        jobs = self._lists[owner]
        start = self._heads[owner]
        end = slice_end(jobs, start)
        if end > start:
            self._heads[owner] = end
            self._size -= end - start  # handed out as skipped: not in the merged order
            self._out.add(owner)
        return BacklogSlice(jobs, start, end)

    def rest(self) -> list[SchedulingJob]:
        """Every job not handed out yet, owner by owner (a strict queue stops)."""
        return [job for owner, jobs in self._lists.items() for job in jobs[self._heads[owner] :]]

    def share(self, owner: str, extra: list[float] | None = None) -> float:
        used = self._allocated.get(owner)
        if used is None:
            used = [0.0] * len(self._inverse_total)
        return self._dominant(used, extra, self._inverse_total) / self._weights.get(owner, 1.0)

    def lowest_other(self, owner: str) -> tuple[str, float] | None:
        """The owner with jobs waiting in this queue at the round's start, other than
        ``owner``, with the lowest weighted dominant share now (``None`` if there is none)."""
        best: tuple[float, str] | None = None
        for other in self._lists:
            if other != owner:
                candidate = (self.share(other), other)
                if best is None or candidate < best:
                    best = candidate
        return None if best is None else (best[1], best[0])

    # --- the heap -------------------------------------------------------------------------

    def _push(self, owner: str) -> None:
        head = self._heads[owner]
        jobs = self._lists[owner]
        if head >= len(jobs):
            return
        share = self.share(owner, jobs[head].total.tolist())
        entry = (share, self._rank[owner][head], self._version[owner], owner)
        heapq.heappush(self._heap, entry)

    def _pick(self) -> bool:
        if self._out:
            for owner in self._out:  # served or charged: its entries are stale
                self._version[owner] += 1
                self._push(owner)
            self._out.clear()
        while self._heap:
            _, _, version, owner = heapq.heappop(self._heap)
            if version != self._version[owner]:
                continue
            jobs = self._lists[owner]
            self._order.append(jobs[self._heads[owner]])
            self._owners.append(owner)
            self._heads[owner] += 1
            self._out.add(owner)
            return True
        return False
