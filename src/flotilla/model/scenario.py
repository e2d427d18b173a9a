"""The scenario file: a fleet, its queues and quotas, and a workload over virtual time.

This module is the contract of ``../shared/spec/scenario.md`` in pydantic form. Fields may be
added; none of the contract's fields is renamed or changes meaning.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, model_validator

from flotilla.model.base import MAX_SECONDS, Seconds, Strict
from flotilla.model.cluster import ClusterSpec
from flotilla.model.job import JobSpec
from flotilla.model.modes import Mode as Mode
from flotilla.model.queue import PriorityClass, QueueSpec, QuotaSpec


class FairShare(StrEnum):
    DRF = "drf"
    FIFO = "fifo"


class Queueing(StrEnum):
    BEST_EFFORT_FIFO = "best-effort-fifo"
    STRICT_FIFO = "strict-fifo"
    BACKFILL = "backfill"


class PluginSettings(Strict):
    """Which plugins run (a profile), by entry-point name. Extension of the contract."""

    profile: str = "default"
    enabled: list[str] = []
    disabled: list[str] = []


class Settings(Strict):
    cycle_interval: float = Field(default=1, gt=0, le=MAX_SECONDS)
    mode: Mode = Mode.SYNC
    assignment_strategy: str = "resource-aware"
    fair_share: FairShare = FairShare.DRF
    queueing: Queueing = Queueing.BEST_EFFORT_FIFO
    owner_limit_stop: bool = False
    """Extension: under ``strict-fifo``, a job held back only by its owner's limit stops its
    queue too (Slurm's ``assoc_limit_stop``); by default the queue goes on past it, as Slurm
    does, so one owner at its limit does not hold up the others."""
    fair_share_preemption: bool = False
    priority_preemption: bool = False
    usage_half_life: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    """Extension: with DRF, order queues by usage decayed with this half-life (seconds) added
    to what they hold now (``scheduler/decayed_usage.py``); ``None``: current holdings only."""
    max_time: Seconds | None = None
    heartbeat_timeout: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    """Extension, the service's only: seconds a cluster's backend may stay silent before the
    cluster becomes unreachable and its runs end as node failures (``None``: the service's
    own, 30 s). The simulator loses a cluster at its ``fail_at`` at once; ``flotilla replay``
    sets it so the service does within a cycle."""
    plugins: PluginSettings = PluginSettings()

    @model_validator(mode="after")
    def _decay_needs_drf(self) -> Settings:
        if self.usage_half_life is not None and self.fair_share is not FairShare.DRF:
            raise ValueError("usage_half_life: orders queues by DRF; it needs fair_share: drf")
        return self


class ScenarioJobState(StrEnum):
    """A job's state in a simulated scenario: what the report shows and an ``expect`` entry
    asks for. The service's durable job state is ``flotilla.store.JobState`` (it has
    ``leased`` and ``pending`` besides)."""

    QUEUED = "queued"
    HELD = "held"
    """Held by a user (``hold_at``) until released (``release_at``): the scheduler passes it
    by."""
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    SKIPPED = "skipped"
    """A dependency ended as its condition does not accept (``flotilla.lifecycle``)."""


class Expectation(Strict):
    """One ``expect`` entry: a job's or a queue's state after the cycle at ``at``."""

    at: float | Literal["end"]
    job: str | None = None
    queue: str | None = None
    state: ScenarioJobState | None = None
    cluster: str | None = None
    running: int | None = Field(default=None, ge=0)
    queued: int | None = Field(default=None, ge=0)
    reason: str | None = None
    """Extension: a substring the job's pending reason must contain."""
    preemptions: int | None = Field(default=None, ge=0)
    """Extension: how many times the job was preempted so far."""
    placements: int | None = Field(default=None, ge=0)
    """Extension: how many of the job's replicas are placed (a non-strict gang grows)."""

    @model_validator(mode="after")
    def _one_subject(self) -> Expectation:
        if (self.job is None) == (self.queue is None):
            raise ValueError("name exactly one of job or queue")
        if self.job is not None and (self.running is not None or self.queued is not None):
            raise ValueError("running and queued are counts of a queue, not of a job")
        if self.queue is not None and (
            self.state is not None
            or self.cluster is not None
            or self.reason is not None
            or self.placements is not None
            or self.preemptions is not None
        ):
            raise ValueError(
                "state, cluster, reason, placements and preemptions describe a job, not a queue"
            )
        return self


class RuntimeSource(StrEnum):
    """Where a live export's runtime estimate of a job comes from."""

    MAX_RUNTIME = "max_runtime"
    """The job's own ``max_runtime``."""
    HISTORY = "history"
    """Quantiles of past runs of alike jobs (same queue, owner, name; or fewer of those)."""
    NONE = "none"
    """No estimate: the job runs past the end of the simulation."""


class RuntimeEstimate(Strict):
    """A job's expected runtime in a live export and how it was estimated."""

    seconds: Seconds | None = None
    source: RuntimeSource = RuntimeSource.NONE
    basis: str = ""
    """In words: e.g. ``p50 of 14 runs of queue a, owner bob, name train``."""


class LiveRun(Strict):
    """Where a job of a live export runs at t=0, and for how long it has run."""

    cluster: str
    elapsed: Seconds = 0
    """Seconds it had run when the export was taken: ``min_runtime`` and the work a
    preemption loses count from ``-elapsed``."""
    since_checkpoint: Seconds | None = None
    """Extension: seconds since the checkpoint it last reported (``flotilla.checkpoint()``)
    when the export was taken; none reported: null."""
    placements: list[dict[str, Any]] = Field(min_length=1)
    """Its placements in the assignment's one JSON form (``framework/assignment_record.py``):
    ``{task, replica, node, gpus, shares, gpu_memory}``."""


class LiveJob(Strict):
    """One job of a live export: the service's id and state, and its runtime estimate."""

    job: str
    """The scenario job it became."""
    id: str
    state: str
    estimate: RuntimeEstimate = RuntimeEstimate()
    running: LiveRun | None = None
    """Set for a job active at the export: it holds these placements from t=0, and its
    ``duration`` is what is left of its run."""


class LiveState(Strict):
    """Extension: what a scenario exported from a live service (``flotilla fleet export
    --scenario``) knows beyond a plan: when it was taken and each job's live state."""

    exported_at: str = ""
    fleet_version: int = 0
    jobs: list[LiveJob] = []


class Scenario(Strict):
    name: str = Field(min_length=1)
    description: str = ""
    settings: Settings = Settings()
    priority_classes: list[PriorityClass] = []
    clusters: list[ClusterSpec] = Field(min_length=1)
    quotas: list[QuotaSpec] = []
    queues: list[QueueSpec] = Field(min_length=1)
    jobs: list[JobSpec] = []
    expect: list[Expectation] = []
    live: LiveState | None = None
    """Extension: set by a live export; its running jobs start placed at t=0."""
