"""Queues, their preemption policies, priority classes and the quota tree."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, ValidationInfo, field_validator, model_validator

from flotilla.model.base import MAX_PRIORITY, Name, ResourceList, Strict, Weight


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
    max_priority_threshold: int | None = Field(default=None, ge=-MAX_PRIORITY, le=MAX_PRIORITY)


class Preemption(Strict):
    """Kueue's per-queue preemption policy."""

    within_queue: WithinQueue = WithinQueue.NEVER
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    borrow_within_cohort: BorrowWithinCohort = BorrowWithinCohort()


class OwnerOrder(StrEnum):
    DRF = "drf"
    """Owners by weighted DRF within the queue (Slurm's fair tree at the user level)."""
    QUEUE = "queue"
    """The queue's own order (priority, then submission) across owners: limits only."""


class OwnerLimit(Strict):
    """Extension: one owner's own limits in a queue (``owners.limits.OWNER``), in place of
    the queue's per-owner ``max_running_jobs`` and, resource by resource, ``max_resources``
    for the fields it names; what it does not name stays the queue's."""

    max_running_jobs: int | None = Field(default=None, ge=1)
    max_resources: ResourceList | None = None

    @model_validator(mode="after")
    def _names_a_limit(self) -> OwnerLimit:
        """An override that names no limit changes nothing: surely a mistake."""
        if self.max_running_jobs is None and not self.max_resources:
            raise ValueError("names neither max_running_jobs nor max_resources")
        return self


class Owners(Strict):
    """Extension: the owners of one queue's jobs (a job's ``user``, else whoever submitted
    it) share the queue fairly and within limits (``scheduler/owner_order.py``,
    ``plugins/owner_limits.py``)."""

    order: OwnerOrder = OwnerOrder.DRF
    weights: dict[str, Weight] = {}
    """An owner's weight in the queue's DRF (1 if not named)."""
    max_running_jobs: int | None = Field(default=None, ge=1)
    """Each owner runs at most this many jobs of the queue at once."""
    max_resources: ResourceList | None = None
    """Each owner's running jobs of the queue hold at most this much of each resource named."""
    limits: dict[str, OwnerLimit] = {}
    """Owner → its own limits, in place of the two above for the fields (and resources) it
    names: ``{alice: {max_running_jobs: 10}}``; an owner not named has the queue's."""


class QueueSpec(Strict):
    name: Name
    quota: str | None = None
    weight: Weight = 1.0
    preemption: Preemption = Preemption()
    owners: Owners | None = None
    """Extension: fairness and limits among the owners of the queue's jobs; ``None``: the
    queue's order alone, whoever owns a job."""


class PriorityClass(Strict):
    name: Name
    value: int = Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY)
    preemptible: bool = True


class QuotaSpec(Strict):
    """A node of the elastic quota tree (Kueue cohort / Koordinator ElasticQuota)."""

    name: Name
    min: ResourceList = {}
    max: ResourceList | None = None
    lending_limit: ResourceList | None = None
    weight: Weight = 1.0
    children: list[QuotaSpec] = []

    @field_validator("max")
    @classmethod
    def _max_not_below_min(
        cls, ceiling: ResourceList | None, info: ValidationInfo
    ) -> ResourceList | None:
        """A guarantee above the ceiling can never be honoured (Kueue refuses it too)."""
        for resource, guaranteed in (info.data.get("min") or {}).items():
            limit = (ceiling or {}).get(resource)
            if limit is not None and guaranteed > limit:
                raise ValueError(
                    f"{resource} {limit:g} is below min.{resource} {guaranteed:g}: a quota "
                    "cannot guarantee more than its ceiling"
                )
        return ceiling
