"""Inputs and results of one scheduling round: a snapshot in, decisions and reasons out."""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter
from typing import Any

from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import Assignment
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.quota import QuotaTree
from flotilla.framework.resources import Vector
from flotilla.model.queue import Owners, Preemption
from flotilla.model.scenario import FairShare, Queueing, Settings


@dataclass(frozen=True)
class QueueInfo:
    name: str
    weight: float = 1.0
    order: int = 0
    quota: str | None = None
    preemption: Preemption = field(default_factory=Preemption)
    owners: Owners | None = None
    """Fairness and limits among the owners of the queue's jobs (``None``: none)."""


@dataclass(frozen=True)
class RunningJob:
    job: SchedulingJob
    assignment: Assignment
    started_at: float = 0.0
    """When the current run started (after its cluster's start-up delay; a run not started
    yet: when it will, or now): preemption takes the youngest first, and its protection
    (``min_runtime``) and the work it would lose count from then."""
    last_checkpoint_at: float | None = None
    """When the run last reported a checkpoint (``flotilla.checkpoint()``), if it did: the
    work a preemption loses is counted from there (``framework/preemption.py``)."""

    def held(self, size: int) -> Vector:
        """What it holds: the job's total when every replica is placed (the common case, no
        arithmetic), else the sum of its placements (a non-strict gang still growing)."""
        if len(self.assignment.placements) == self.job.replica_count:
            return self.job.total
        return self.assignment.held(size)


@dataclass(frozen=True)
class BacklogView:
    """The snapshot's jobs as a caller that keeps them incrementally already holds them (the
    simulator's ``sim/backlog.py``), so a round neither groups, sorts nor sums them again.

    One contract for every field: it holds exactly what the snapshot's sequences hold, and
    it never changes after the snapshot is made (tuples, fresh dictionaries): the result's
    pending reasons refer to slices of the ``by_queue`` sequences, and an async round reads the
    view on another thread. A field left ``None`` is computed by the round.
    """

    by_queue: Mapping[str, Sequence[SchedulingJob]]
    """``queued`` grouped by queue, each queue's jobs in ``PRIORITY_ORDER`` — priority
    descending, then submit time, then sequence — and every queue of ``queues`` present
    (empty if it has no job). Used when the profile's QueueSort plugin is that order."""
    running_by_name: Mapping[str, RunningJob] | None = None
    """``running`` keyed by job name, in the same order."""
    allocated: Mapping[str, Vector] | None = None
    """What each queue's running jobs hold."""


@dataclass(frozen=True)
class SchedulingSnapshot:
    """Everything one scheduling round reads. Cluster node tables include running allocations.

    The round never mutates the snapshot: it works on copies of the node tables, so the same
    snapshot can be handed to a round in another thread (async mode).
    """

    time: float
    clusters: Sequence[Cluster]
    queues: Sequence[QueueInfo]
    queued: Sequence[SchedulingJob]
    running: Sequence[RunningJob] = ()
    quotas: QuotaTree | None = None
    backlog: BacklogView | None = None
    """The same jobs as the caller keeps them (``BacklogView``); ``None`` to have the round
    group, sort and sum them."""
    usage: Mapping[str, list[float]] | None = None
    """Each queue's decayed usage as an average allocation, attached by
    ``SchedulingAlgorithm.observe_usage`` when the round runs elsewhere (a forked child);
    ``None``: the engine observes its own ledger (``scheduler/decayed_usage.py``)."""


@dataclass(frozen=True)
class ScheduledJob:
    job: SchedulingJob
    assignment: Assignment
    reservation: str | None = None


@dataclass(frozen=True)
class Eviction:
    """A running job preempted so that ``by`` could run."""

    job: str
    by: str
    reason: str


@dataclass(frozen=True)
class CycleStats:
    considered: int = 0
    scheduled: int = 0
    preempted: int = 0
    cache_hits: int = 0
    seconds: float = 0.0


PRIORITY_ORDER = "priority-sort"
"""The QueueSort plugin whose order ``BacklogView.by_queue`` is kept in."""

_NAME = attrgetter("name")


@dataclass(frozen=True, slots=True)
class BacklogSlice:
    """Jobs ``start:end`` of an ordered backlog, referred to without copying them: a slice
    of a million identical jobs that share one reason costs one entry, not a million."""

    jobs: Sequence[SchedulingJob]
    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start

    def names(self) -> Iterator[str]:
        return map(_NAME, self.jobs[self.start : self.end])


class PendingReasons(Mapping[str, str]):
    """Why each job stays queued: a ``Mapping`` from job name to reason, recorded as the round
    decides (single reasons, and whole slices of jobs sharing one reason).

    The name → reason dictionary is built on first read, by replaying what was recorded in
    order, so it is exactly the dictionary that setting each reason one by one would give
    (same keys, same order, the last reason of a job wins). A round over a huge backlog of
    identical jobs therefore costs O(slices) to decide; a caller pays per job only if it
    reads per job. ``parts`` lets a caller consume the slices without expanding them."""

    __slots__ = ("_current", "_parts", "_resolved")

    def __init__(self, reasons: Mapping[str, str] | None = None) -> None:
        self._parts: list[dict[str, str] | tuple[BacklogSlice, str]] = []
        self._current: dict[str, str] | None = None
        self._resolved: dict[str, str] | None = None
        if reasons:
            self.update(reasons)

    def set(self, name: str, reason: str) -> None:
        current = self._current
        if current is None:
            current = self._current = {}
            self._parts.append(current)
        current[name] = reason
        self._resolved = None

    def update(self, reasons: Mapping[str, str]) -> None:
        for name, reason in reasons.items():
            self.set(name, reason)

    def set_slice(self, jobs: BacklogSlice, reason: str) -> None:
        """Every job of ``jobs`` waits for ``reason``."""
        if len(jobs) == 0:
            return
        self._parts.append((jobs, reason))
        self._current = None
        self._resolved = None

    def parts(self) -> Iterator[tuple[str, str] | tuple[BacklogSlice, str]]:
        """What was recorded, in order: (name, reason) pairs and (slice, reason) pairs."""
        for part in self._parts:
            if isinstance(part, dict):
                yield from part.items()
            else:
                yield part

    def _reasons(self) -> dict[str, str]:
        resolved = self._resolved
        if resolved is None:
            resolved = {}
            for part in self._parts:
                if isinstance(part, dict):
                    resolved.update(part)
                else:
                    jobs, reason = part
                    resolved.update(zip(jobs.names(), repeat(reason)))
            self._resolved = resolved
        return resolved

    def __getitem__(self, name: str) -> str:
        return self._reasons()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._reasons())

    def __len__(self) -> int:
        return len(self._reasons())

    def __contains__(self, name: object) -> bool:
        return name in self._reasons()

    # The dictionary's own views and ``get``: C-level, not the Mapping mixins' per-key calls.
    def keys(self) -> KeysView[str]:
        return self._reasons().keys()

    def items(self) -> ItemsView[str, str]:
        return self._reasons().items()

    def values(self) -> ValuesView[str]:
        return self._reasons().values()

    def get(self, name: str, default: Any = None) -> Any:
        return self._reasons().get(name, default)

    def __repr__(self) -> str:
        return f"PendingReasons({self._reasons()!r})"


@dataclass(frozen=True)
class CycleResult:
    """Decisions of one round: jobs to start, jobs to evict first, and a reason for every job
    left queued."""

    time: float
    scheduled: tuple[ScheduledJob, ...] = ()
    preempted: tuple[Eviction, ...] = ()
    pending: Mapping[str, str] = field(default_factory=dict)
    """Job name → reason; a ``PendingReasons`` when a round built it (expanded on first read)."""
    growing: Mapping[str, str] = field(default_factory=dict)
    """Running non-strict gangs with replicas still to place → why those wait
    (``2 of 4 replicas placed; the rest wait: …``)."""
    stats: CycleStats = CycleStats()


@dataclass(frozen=True)
class SchedulingConfig:
    assignment_strategy: str = "resource-aware"
    fair_share: FairShare = FairShare.DRF
    queueing: Queueing = Queueing.BEST_EFFORT_FIFO
    owner_limit_stop: bool = False
    profile: str = "default"
    usage_half_life: float | None = None
    enabled_plugins: tuple[str, ...] = ()
    disabled_plugins: tuple[str, ...] = ()


def scheduling_config(settings: Settings) -> SchedulingConfig:
    """The engine's configuration from a scenario's or a fleet file's ``settings``: the
    simulator and the service read the same fields the same way."""
    enabled = list(settings.plugins.enabled)
    if settings.priority_preemption:
        enabled.append("priority-preemption")
    if settings.fair_share_preemption:
        enabled.append("fair-share-preemption")
    return SchedulingConfig(
        assignment_strategy=settings.assignment_strategy,
        fair_share=settings.fair_share,
        queueing=settings.queueing,
        owner_limit_stop=settings.owner_limit_stop,
        profile=settings.plugins.profile,
        usage_half_life=settings.usage_half_life,
        enabled_plugins=tuple(enabled),
        disabled_plugins=tuple(settings.plugins.disabled),
    )
