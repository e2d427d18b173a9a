"""What the API server may ask of the scheduling loop running in the same process.

The server reads and writes durable state through the ``Store``; everything that only the
loop knows — why a job waits right now, whether this replica leads, how the last cycle went,
the backends that hold logs — it asks through this handle. A server without a local loop
(``None``) answers those parts from the store alone (reasons recorded on the job).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from flotilla.backends.interface import LogChunk, LogsRequest, RunStatus
from flotilla.scheduler.precedence import Precedence
from flotilla.service.metrics import SchedulerMetrics
from flotilla.store import JobRecord


@dataclass(frozen=True)
class CycleReport:
    """The last completed cycle, for ``GET /v1/scheduling/report``."""

    number: int = 0
    finished_at: float | None = None
    seconds: float = 0.0
    algorithm_seconds: float | None = None
    leader: bool = False
    considered: int = 0
    scheduled: int = 0
    preempted: int = 0
    queued_by_queue: Mapping[str, int] = field(default_factory=dict)
    running_by_queue: Mapping[str, int] = field(default_factory=dict)
    dominant_share: Mapping[str, float] = field(default_factory=dict)
    runner_state: str | None = None
    """Async mode: idle | run-requested | running | result-ready."""


class SchedulerHandle(Protocol):
    metrics: SchedulerMetrics
    precedence: Precedence
    """The API marks the requests it serves urgent here: a scheduling round yields to them."""

    @property
    def is_leader(self) -> bool: ...

    def pending_reason(self, job_id: str) -> str | None:
        """Why a waiting job waits, from the latest scheduling round; None if unknown."""
        ...

    def last_cycle(self) -> CycleReport: ...

    def logs(self, job_id: str, request: LogsRequest) -> LogChunk:
        """Log output of the job's run ``request.run_id`` (its latest run when that is not
        one of the job's runs) from its cluster's backend (``UnknownRun`` if none)."""
        ...

    def run_status(self, job_id: str, run_id: str) -> RunStatus:
        """The job's run ``run_id`` as its cluster's backend reports it now, with the engine's
        own ids of its replicas (``UnknownRun`` if no backend here has it)."""
        ...

    def wake(self) -> None:
        """Something changed (a submission, a cancel): run the next cycle now."""
        ...

    def cancelled(self, jobs: Sequence[JobRecord]) -> None:
        """Users' cancels of ``jobs`` were just committed: stop their runs now, without
        waiting for the change feed to bring the requests, and wake as ``wake`` does."""
        ...
