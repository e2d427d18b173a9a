"""Queues, their preemption policies, priority classes and the quota tree."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from flotilla.model.base import Name, ResourceList, Strict


class WithinQueue(StrEnum):
    NEVER = "never"
    LOWER_PRIORITY = "lower_priority"


class ReclaimWithinCohort(StrEnum):
    NEVER = "never"
    LOWER_PRIORITY = "lower_priority"
    ANY = "any"


class BorrowPolicy(StrEnum):
    NEVER = "never"
    LOWER_PRIORITY = "lower_priority"


class BorrowWithinCohort(Strict):
    policy: BorrowPolicy = BorrowPolicy.NEVER
    max_priority_threshold: int | None = None


class Preemption(Strict):
    """Kueue's per-queue preemption policy."""

    within_queue: WithinQueue = WithinQueue.NEVER
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    borrow_within_cohort: BorrowWithinCohort = BorrowWithinCohort()


class QueueSpec(Strict):
    name: Name
    quota: str | None = None
    weight: float = Field(default=1.0, gt=0)
    preemption: Preemption = Preemption()


class PriorityClass(Strict):
    name: Name
    value: int
    preemptible: bool = True


class QuotaSpec(Strict):
    """A node of the elastic quota tree (Kueue cohort / Koordinator ElasticQuota)."""

    name: Name
    min: ResourceList = {}
    max: ResourceList | None = None
    lending_limit: ResourceList | None = None
    weight: float = Field(default=1.0, gt=0)
    children: list[QuotaSpec] = []
