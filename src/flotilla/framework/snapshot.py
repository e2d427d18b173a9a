"""Inputs and results of one scheduling run: a snapshot in, decisions and reasons out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import Assignment
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.quota import QuotaTree
from flotilla.framework.resources import Vector
from flotilla.model.queue import Preemption
from flotilla.model.scenario import FairShare, Queueing


@dataclass(frozen=True)
class QueueInfo:
    name: str
    weight: float = 1.0
    order: int = 0
    quota: str | None = None
    preemption: Preemption = field(default_factory=Preemption)


@dataclass(frozen=True)
class RunningJob:
    job: SchedulingJob
    assignment: Assignment
    started_at: float = 0.0
    """When the current run was scheduled: preemption takes the youngest first."""

    def held(self, size: int) -> Vector:
        """What it holds: the job's total when every replica is placed (the common case, no
        arithmetic), else the sum of its placements (a non-strict gang still growing)."""
        if len(self.assignment.placements) == self.job.replica_count:
            return self.job.total
        return self.assignment.held(size)


@dataclass(frozen=True)
class SchedulingSnapshot:
    """Everything one scheduling run reads. Cluster node tables include running allocations.

    The run never mutates the snapshot: it works on copies of the node tables, so the same
    snapshot can be handed to a run in another thread (async mode).
    """

    time: float
    clusters: Sequence[Cluster]
    queues: Sequence[QueueInfo]
    queued: Sequence[SchedulingJob]
    running: Sequence[RunningJob] = ()
    quotas: QuotaTree | None = None
    allocated: Mapping[str, Vector] | None = None
    """What each queue's running jobs hold, if the caller keeps it up to date incrementally
    (it then saves summing every running job each run); None to have it computed."""


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


@dataclass(frozen=True)
class CycleResult:
    """Decisions of one run: jobs to start, jobs to evict first, and a reason for every job
    left queued."""

    time: float
    scheduled: tuple[ScheduledJob, ...] = ()
    preempted: tuple[Eviction, ...] = ()
    pending: Mapping[str, str] = field(default_factory=dict)
    stats: CycleStats = CycleStats()
    quota_usage: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    runtime_quota: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class SchedulingConfig:
    assignment_strategy: str = "cluster-only"
    fair_share: FairShare = FairShare.DRF
    queueing: Queueing = Queueing.BEST_EFFORT_FIFO
    profile: str = "default"
    enabled_plugins: tuple[str, ...] = ()
    disabled_plugins: tuple[str, ...] = ()
