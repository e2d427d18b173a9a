"""Which job to try next: DRF progressive filling across queues, or global FIFO.

DRF (Ghodsi et al., Armada's rule): the next job comes from the queue whose weighted dominant
share, counting that job, would be lowest. Only the chosen queue's share changes when a job is
placed, so a heap keyed on each queue's cost-with-its-head is exact.

With ``usage_half_life`` each queue's decayed past usage (``scheduler/decayed_usage.py``, as an
average allocation) is added to what it holds before the dominant share is taken: a queue that
used a lot lately ranks behind one that did not, and progressive filling within the round
works as before on top of it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import repeat
from operator import attrgetter, eq

import numpy as np

from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.owners import owner_label, owner_of
from flotilla.framework.resources import EPSILON, Vector
from flotilla.framework.snapshot import BacklogSlice
from flotilla.model.queue import OwnerOrder
from flotilla.scheduler.owner_order import OwnerMerge
from flotilla.scheduler.types import QueueInfo


class DrfOrder:
    """Yields jobs in DRF order; the caller reports each outcome with ``placed``/``skipped``/
    ``blocked``, and any other change of a queue's allocation (preemption, a gang member of
    another queue) with ``adjust``.

    Allocations are kept as lists of Python floats: a share is a handful of multiplications
    and a max over a few resources, which numpy would spend a call on each. The arithmetic
    is the same IEEE arithmetic, so the order is the same as with arrays.
    """

    def __init__(
        self,
        queues: Sequence[QueueInfo],
        jobs_by_queue: Mapping[str, Sequence[SchedulingJob]],
        allocated: Mapping[str, Vector],
        total: Vector,
        usage: Mapping[str, list[float]] | None = None,
        owner_allocated: Mapping[str, Mapping[str, Vector]] | None = None,
    ) -> None:
        """``owner_allocated``: for each queue whose owners share it by DRF (``owners``),
        what each owner's running jobs of the queue hold."""
        self._jobs = jobs_by_queue
        self._past: dict[str, list[float]] = {}
        """Queue → decayed past usage as an average allocation; a queue absent used nothing."""
        if usage:
            size = len(total)
            for name, amounts in usage.items():
                # The resource space only grows: a shorter vector is padded with zeros.
                padded = amounts[:size] + [0.0] * (size - len(amounts))
                if any(padded):
                    self._past[name] = padded
        self._weights = {queue.name: queue.weight for queue in queues}
        self._order = {queue.name: queue.order for queue in queues}
        self._allocated: dict[str, list[float]] = {
            name: allocated[name].tolist() for name in allocated
        }
        zeros = [0.0] * len(total)
        for name in jobs_by_queue:
            self._weights.setdefault(name, 1.0)
            self._order.setdefault(name, len(self._order))
            if name not in self._allocated:  # (not setdefault: no list built per queue)
                self._allocated[name] = list(zeros)
        inverse = np.divide(1.0, total, out=np.zeros_like(total), where=total > EPSILON)
        self._inverse_total: list[float] = inverse.tolist()
        self._merges: dict[str, OwnerMerge] = {}
        """Queues whose owners share them by DRF: their jobs, merged owner by owner."""
        owner_queues = [
            queue
            for queue in queues
            if queue.owners is not None
            and queue.owners.order is OwnerOrder.DRF
            and jobs_by_queue.get(queue.name)
        ]
        self._by_owner = {queue.name for queue in queues if queue.owners is not None}
        """Queues whose owners matter (shares or limits): alike jobs must share the owner."""
        if owner_queues:
            merged: dict[str, Sequence[SchedulingJob]] = dict(jobs_by_queue)
            for queue in owner_queues:
                assert queue.owners is not None
                held = (owner_allocated or {}).get(queue.name, {})
                merge = OwnerMerge(
                    jobs_by_queue[queue.name],
                    queue.owners.weights,
                    {owner: amount.tolist() for owner, amount in held.items()},
                    self._inverse_total,
                    _dominant,
                )
                merged[queue.name] = self._merges[queue.name] = merge
            self._jobs = merged
        self._heads = dict.fromkeys(jobs_by_queue, 0)
        self._version = dict.fromkeys(jobs_by_queue, 0)
        self._stopped: set[str] = set()
        self._rerank: set[str] = set()
        """Queues whose allocation changed (``adjust``): pushed again before the next pop."""
        self._heap: list[tuple[float, int, int, str]] = []
        for name, jobs in jobs_by_queue.items():
            if jobs:
                self._push(name)

    def share(self, queue: str, extra: Vector | None = None) -> float:
        """Weighted dominant share of ``queue``, optionally counting ``extra``."""
        used = self._allocated.get(queue)
        if used is None:
            used = [0.0] * len(self._inverse_total)
        weight = self._weights.get(queue, 1.0)
        return (
            _dominant(used, extra.tolist() if extra is not None else None, self._inverse_total)
            / weight
        )

    def _push(self, queue: str) -> None:
        head = self._jobs[queue][self._heads[queue]]
        extra = head.total.tolist()
        past = self._past.get(queue)
        if past is not None:
            extra = [a + b for a, b in zip(extra, past, strict=True)]
        share = _dominant(self._allocated[queue], extra, self._inverse_total)
        entry = (share / self._weights[queue], self._order[queue], self._version[queue], queue)
        heapq.heappush(self._heap, entry)

    def __iter__(self) -> Iterator[SchedulingJob]:
        while True:
            if self._rerank:
                for name in self._rerank:
                    self._push(name)
                self._rerank.clear()
            if not self._heap:
                return
            _, _, version, queue = heapq.heappop(self._heap)
            if version != self._version[queue] or queue in self._stopped:
                continue  # a stale entry: the queue's share changed after it was pushed
            yield self._jobs[queue][self._heads[queue]]

    def placed(self, job: SchedulingJob) -> None:
        used = self._allocated[job.queue]
        self._allocated[job.queue] = [a + b for a, b in zip(used, job.total.tolist(), strict=True)]
        merge = self._merges.get(job.queue)
        if merge is not None:
            merge.charge(owner_of(job), job.total.tolist())
        self._advance(job.queue)

    def skipped(self, job: SchedulingJob) -> None:
        """The job stays queued; the queue moves on to its next job (best-effort FIFO)."""
        self._advance(job.queue)

    def skip_alike(
        self, job: SchedulingJob, same: Callable[[SchedulingJob], bool] | None = None
    ) -> BacklogSlice:
        """Skip ``job`` and every job right behind it in its queue that is ``alike`` and for
        which ``same`` holds (it would fail the same way); returns the ones skipped after it."""
        queue = job.queue
        merge = self._merges.get(queue)
        if merge is not None:  # alike jobs of the same owner: behind it in its own list
            skipped = merge.skip_alike(
                self._heads[queue], lambda jobs, start: _slice_end(jobs, start, job, same)
            )
            self._advance(queue)
            return skipped
        if queue in self._by_owner:
            same = _same_owner(job, same)
        jobs = self._jobs[queue]
        start = self._heads[queue] + 1
        end = _slice_end(jobs, start, job, same)
        self._heads[queue] = end - 1
        self._advance(queue)
        return BacklogSlice(jobs, start, end)

    def blocked(self, job: SchedulingJob) -> Sequence[SchedulingJob]:
        """The queue stops for this cycle (strict FIFO); returns the jobs left behind."""
        self._stopped.add(job.queue)
        self._rerank.discard(job.queue)
        start = self._heads[job.queue] + 1
        return self._jobs[job.queue][start:]

    def adjust(self, queue: str, delta: Vector, owner: str | None = None) -> None:
        """A queue's allocation changed outside ``placed``: re-rank it. ``owner``: whose
        jobs of the queue changed, for a queue whose owners share it by DRF (an eviction,
        which does not say, leaves the owners' shares as they were for the round)."""
        used = self._allocated.get(queue)
        if used is None:
            return
        amounts = delta.tolist()
        self._allocated[queue] = [a + b for a, b in zip(used, amounts, strict=True)]
        if owner is not None:
            merge = self._merges.get(queue)
            if merge is not None:
                merge.charge(owner, amounts)
        # A new version, and a new entry before the next pop. Usually the queue is the one
        # being served and its _advance follows, which pushes anyway: deferring the push
        # saves computing a share that would only be dropped as stale.
        waiting = queue in self._heads and self._heads[queue] < len(self._jobs[queue])
        if waiting and queue not in self._stopped:
            self._version[queue] += 1
            self._rerank.add(queue)

    def owner_note(self, job: SchedulingJob) -> str | None:
        """Why the owner level holds ``job`` back, for its reason: another owner of its queue
        has a lower weighted dominant share and is served first (``None`` if none has, or
        the queue's owners do not share it by DRF)."""
        merge = self._merges.get(job.queue)
        if merge is None:
            return None
        owner = owner_of(job)
        lowest = merge.lowest_other(owner)
        if lowest is None:
            return None
        mine = merge.share(owner)
        other, theirs = lowest
        if not mine > theirs:
            return None
        return (
            f"owner {owner_label(owner)}'s dominant share {mine:.2f} > {owner_label(other)}'s "
            f"{theirs:.2f} in queue {job.queue} (owners share it by DRF)"
        )

    def _advance(self, queue: str) -> None:
        self._heads[queue] += 1
        self._version[queue] += 1
        self._rerank.discard(queue)
        if self._heads[queue] < len(self._jobs[queue]):
            self._push(queue)


def _dominant(used: list[float], extra: list[float] | None, inverse_total: list[float]) -> float:
    """``max((used + extra) * inverse_total, initial=0)`` element by element, as numpy
    computes it: the same sums and products, and the same maximum."""
    dominant = 0.0
    if extra is None:
        for amount, inverse in zip(used, inverse_total, strict=True):
            value = amount * inverse
            if value > dominant:
                dominant = value
    else:
        for amount, more, inverse in zip(used, extra, inverse_total, strict=True):
            value = (amount + more) * inverse
            if value > dominant:
                dominant = value
    return dominant


def _same_owner(
    model: SchedulingJob, same: Callable[[SchedulingJob], bool] | None
) -> Callable[[SchedulingJob], bool]:
    """``same``, and the job has ``model``'s owner (an owner's limit refuses only its jobs)."""
    owner = model.user
    if same is None:
        return lambda job: job.user == owner
    return lambda job: job.user == owner and same(job)


class FifoOrder:
    """Global submission order across every queue (``fair_share: fifo``)."""

    def __init__(
        self, jobs: Sequence[SchedulingJob], owner_queues: frozenset[str] = frozenset()
    ) -> None:
        """``owner_queues``: the queues whose owners matter (``owners``)."""
        self._jobs = sorted(jobs, key=lambda job: (job.submit_time, job.sequence))
        self._index = 0
        self._by_owner = owner_queues

    def __iter__(self) -> Iterator[SchedulingJob]:
        while self._index < len(self._jobs):
            yield self._jobs[self._index]

    def placed(self, job: SchedulingJob) -> None:
        self._index += 1

    def skipped(self, job: SchedulingJob) -> None:
        self._index += 1

    def skip_alike(
        self, job: SchedulingJob, same: Callable[[SchedulingJob], bool] | None = None
    ) -> BacklogSlice:
        if job.queue in self._by_owner:
            same = _same_owner(job, same)
        start = self._index + 1
        end = _slice_end(self._jobs, start, job, same)
        self._index = end
        return BacklogSlice(self._jobs, start, end)

    def blocked(self, job: SchedulingJob) -> list[SchedulingJob]:
        rest = self._jobs[self._index + 1 :]
        self._index = len(self._jobs)
        return rest

    def adjust(self, queue: str, delta: Vector, owner: str | None = None) -> None:
        """Global FIFO does not rank by share."""

    def owner_note(self, job: SchedulingJob) -> str | None:
        """Global FIFO does not share queues among owners."""
        return None


_SLICE_FIELDS = attrgetter("priority", "gang", "queue", "placement_key")
"""What makes a job fail as a slice's first job did (with no gang: ``None`` in its place)."""
_FIRST_ONE_BY_ONE = 8
_LONGEST_CHUNK = 4096


def _slice_end(
    jobs: Sequence[SchedulingJob],
    start: int,
    model: SchedulingJob,
    same: Callable[[SchedulingJob], bool] | None,
) -> int:
    """The index after the slice of jobs from ``start`` that would fail as ``model`` did.

    The hot path of a backlog of identical unschedulable jobs. Past its first few jobs, a
    slice is compared in chunks that double in size, each with C-level ``map``s over a slice
    (no Python code per job): a slice of a million jobs costs a few hundred chunks. Tuple
    equality compares the placement key by identity first (jobs of one spec share one key
    object). ``same``, a Python check, then runs only over the slice found.
    """
    wanted = (model.priority, None, model.queue, model.placement_key)
    end, size = start, len(jobs)
    # Most slices are short: look at the first jobs one by one before building chunks.
    one_by_one = min(start + _FIRST_ONE_BY_ONE, size)
    while end < one_by_one and _SLICE_FIELDS(jobs[end]) == wanted:
        end += 1
    if end == one_by_one:
        chunk = _FIRST_ONE_BY_ONE * 2
        while end < size:
            stop = min(end + chunk, size)
            matches = list(map(eq, map(_SLICE_FIELDS, jobs[end:stop]), repeat(wanted)))
            if False in matches:
                end += matches.index(False)
                break
            end = stop
            chunk = min(chunk * 2, _LONGEST_CHUNK)
    if same is not None:
        for index in range(start, end):
            if not same(jobs[index]):
                return index
    return end


def alike(job: SchedulingJob, model: SchedulingJob) -> bool:
    """Would fail exactly as ``model`` did: same queue, priority and shape, and no gang."""
    return (
        job.gang is None
        and job.queue == model.queue
        and job.priority == model.priority
        and (job.placement_key is model.placement_key or job.placement_key == model.placement_key)
    )


def sort_queues(
    jobs: Sequence[SchedulingJob],
    queues: Sequence[QueueInfo],
    sort: Callable[[list[SchedulingJob]], None],
) -> dict[str, list[SchedulingJob]]:
    by_queue: dict[str, list[SchedulingJob]] = {queue.name: [] for queue in queues}
    for job in jobs:
        by_queue.setdefault(job.queue, []).append(job)
    for members in by_queue.values():
        sort(members)
    return by_queue
