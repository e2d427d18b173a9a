"""What the simulator records about each job and each moment it was asked about."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from flotilla.framework.interfaces import Assignment
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.snapshot import PendingReasons
from flotilla.lifecycle.states import TERMINAL_STATE_NAMES, WAITING_STATE_NAMES
from flotilla.model.job import JobSpec
from flotilla.model.scenario import ScenarioJobState

WAITING_STATES = frozenset(ScenarioJobState(name) for name in WAITING_STATE_NAMES)
"""States in which the scheduler considers a job (the lifecycle core's waiting states)."""

TERMINAL_STATES = frozenset(ScenarioJobState(name) for name in TERMINAL_STATE_NAMES)
"""States a simulated job never leaves (the lifecycle core's terminal states)."""


@dataclass(eq=False)
class SimJob:
    spec: JobSpec
    job: SchedulingJob
    state: ScenarioJobState | None = None
    """``None`` until submitted."""
    assignment: Assignment | None = None
    started_at: float | None = None
    first_started_at: float | None = None
    first_scheduled_at: float | None = None
    scheduled_at: float | None = None
    finished_at: float | None = None
    preemptions: int = 0
    lost_gpu_seconds: float = 0.0
    """GPU-seconds its preempted runs had done since their last checkpoint."""
    reason: str | None = None
    run: int = 0
    """Attempt counter: timers of an earlier run are ignored after a requeue."""
    attempts: int = 0
    """Times it was scheduled (a run each; a grown gang's members join the same run)."""
    failures: int = 0
    """Failures its ``retry`` policy counted."""
    held: bool = False
    """Queued but held out of the backlog (a retry backoff, its array's parallelism, victims
    of its preemption still stopping)."""
    stopping: bool = False
    """Preempted, its run still stopping (its grace): it holds its resources until then."""

    @property
    def name(self) -> str:
        return self.job.name

    @property
    def waiting(self) -> bool:
        """Queued, or preempted and not yet rescheduled: the scheduler considers it."""
        return self.state in WAITING_STATES and not self.stopping

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


@dataclass
class Event:
    time: float
    job: str
    event: str
    cluster: str | None = None
    nodes: list[str] | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {"time": self.time, "job": self.job, "event": self.event}
        if self.cluster is not None:
            record["cluster"] = self.cluster
        if self.nodes is not None:
            record["nodes"] = self.nodes
        if self.reason is not None:
            record["reason"] = self.reason
        return record


@dataclass
class Moment:
    """Job and queue facts captured after the cycle at one time, for ``expect`` checks."""

    time: float
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    queues: dict[str, dict[str, int]] = field(default_factory=dict)


class Timer(IntEnum):
    """Timers due at the same time fire in this order."""

    FINISH = 0
    START = 1
    CLUSTER_FAILURE = 2
    SUBMIT = 3
    CANCEL = 4
    GANG_TIMEOUT = 5
    RETRY = 6
    PROTECTION_ENDS = 7
    """A running job's ``min_runtime`` is over: it may be a preemption victim now."""
    STOPPED = 8
    """A preempted run's grace is over: it stopped, and its resources are free."""
    HOLD = 9
    """A user holds the job (``hold_at``)."""
    RELEASE = 10
    """A user releases the held job (``release_at``)."""


def set_waiting_reasons(waiting: Mapping[str, SimJob], pending: Mapping[str, str]) -> None:
    """Give each waiting job named in ``pending`` its reason; other jobs keep theirs.

    ``waiting`` holds exactly the jobs in ``WAITING_STATES``, by name (the simulator's queued
    jobs), so membership stands in for the state check. The simulator does this for every
    waiting job every cycle: a slice of jobs sharing one reason is looked up with C-level
    ``map``/``filter`` and only the attribute store runs per job. Writes happen in the order
    recorded, so each job ends with the reason ``pending`` maps it to.
    """
    if not isinstance(pending, PendingReasons):
        for name, reason in pending.items():
            job = waiting.get(name)
            if job is not None:
                job.reason = reason
        return
    for subject, reason in pending.parts():
        if isinstance(subject, str):
            job = waiting.get(subject)
            if job is not None:
                job.reason = reason
        else:
            for job in filter(None, map(waiting.get, subject.names())):
                job.reason = reason
