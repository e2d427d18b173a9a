"""Holding queued jobs back until their dependencies end, without scanning the backlog.

A queued job with ``depends_on`` stays out of the scheduling snapshot while any job it
depends on has not ended. The gate indexes held jobs by the jobs they wait for, so when the
JobDb's change feed brings a dependency's new state, only that dependency's waiters are
looked at again: a job whose dependencies are all met is released into the backlog; one
whose dependency ended in a state its condition does not accept can never start, and the
loop ends it skipped with a reason naming that dependency.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from flotilla.jobdb import ReadTxn
from flotilla.lifecycle import machine
from flotilla.lifecycle.dependencies import Verdict
from flotilla.lifecycle.effects import SetState
from flotilla.lifecycle.events import DependencyNeverMet, Faulted
from flotilla.lifecycle.view import DependencyView
from flotilla.service.containment import NOT_CONTAINED, JobFaults
from flotilla.store import DependencyRecord, JobRecord

__all__ = ["DependencyGate", "DependencyStatus", "Verdict", "dependency_status"]


@dataclass(frozen=True, slots=True)
class DependencyStatus:
    """Where one job stands against its dependencies."""

    verdict: Verdict
    reason: str
    """What it waits for (``WAITING``), or why it can never start (``NEVER``)."""


def _label(dependency: DependencyRecord, record: JobRecord | None) -> str:
    if record is None or dependency.job == record.id:
        return f"job {dependency.job}"
    return f"job {record.queue}/{record.name} ({record.id[:8]})"


def dependency_views(
    dependencies: Iterable[DependencyRecord], state_of: Mapping[str, JobRecord | None]
) -> tuple[DependencyView, ...]:
    """``state_of``: each dependency's current record (None when not known yet)."""
    views = []
    for dependency in dependencies:
        record = state_of.get(dependency.job_id)
        state = None if record is None else record.state.value
        views.append(DependencyView(_label(dependency, record), dependency.condition, state))
    return tuple(views)


def dependency_status(
    dependencies: Iterable[DependencyRecord], state_of: Mapping[str, JobRecord | None]
) -> DependencyStatus:
    """Where a job with ``dependencies`` stands against them (``state_of``: each one's
    current record, None when not known yet). The rule and its words are the lifecycle
    core's (``machine.dependency_reason``, what ``step`` applies to a waiting job)."""
    verdict, reason = machine.dependency_reason(dependency_views(dependencies, state_of))
    return DependencyStatus(verdict, reason)


class DependencyGate:
    """Queued jobs whose dependencies are not met, indexed by the jobs they wait for."""

    def __init__(self, ended_job: Callable[[str], JobRecord | None] = lambda _job_id: None) -> None:
        self._ended_job = ended_job
        self.faults = JobFaults()
        """Logs a job whose dependencies cannot be read (set to the loop's)."""
        """A dependency the JobDb no longer holds: a job that finished before the retention
        (or before a restart) dropped it; read from the store."""
        self.held: dict[str, JobRecord] = {}
        """Held job id → its queued record."""
        self.reasons: dict[str, str] = {}
        """Held job id → what it waits for (kept current from the change feed)."""
        self.never: dict[str, SetState] = {}
        """Job id → where it ends and why it can never start: skipped (a dependency ended as
        its condition does not accept), or failed (its dependencies could not be read)."""
        self._waiters: dict[str, set[str]] = {}
        """Dependency id → ids of the held jobs that wait for it."""

    def clear(self) -> None:
        self.held.clear()
        self.reasons.clear()
        self.never.clear()
        self._waiters.clear()

    def admit(self, record: JobRecord, read: ReadTxn) -> bool:
        """Whether a queued ``record`` may be scheduled now; if not, it is held (or, when it
        can never start, recorded in ``never``)."""
        self.forget(record.id)
        if not record.dependencies:
            return True
        try:
            status = dependency_status(
                record.dependencies,
                {
                    d.job_id: read.get(d.job_id) or self._ended_job(d.job_id)
                    for d in record.dependencies
                },
            )
        except NOT_CONTAINED:
            raise
        except Exception as error:  # this job's own: it fails, the others go on
            note = self.faults.note("its dependencies", record.id, error)
            self._never(record, Faulted(note))
            return False
        if status.verdict is Verdict.MET:
            return True
        if status.verdict is Verdict.NEVER:
            self._never(record, DependencyNeverMet(status.reason))
            return False
        self.held[record.id] = record
        self.reasons[record.id] = status.reason
        for dependency in record.dependencies:
            self._waiters.setdefault(dependency.job_id, set()).add(record.id)
        return False

    def forget(self, job_id: str) -> None:
        """Stop tracking a job (it left the queued state, or is looked at again)."""
        self.never.pop(job_id, None)
        held = self.held.pop(job_id, None)
        self.reasons.pop(job_id, None)
        if held is None:
            return
        for dependency in held.dependencies:
            waiters = self._waiters.get(dependency.job_id)
            if waiters is not None:
                waiters.discard(job_id)
                if not waiters:
                    del self._waiters[dependency.job_id]

    def changed(self, job_ids: Iterable[str], read: ReadTxn) -> list[JobRecord]:
        """Look again at the jobs waiting for any of ``job_ids`` (jobs the change feed
        brought); returns those released, for the backlog."""
        released: list[JobRecord] = []
        for job_id in job_ids:
            for waiter in sorted(self._waiters.get(job_id, ())):
                record = self.held.get(waiter)
                if record is not None and self.admit(record, read):
                    released.append(record)
        return released

    def _never(self, record: JobRecord, why: Faulted | DependencyNeverMet) -> None:
        """``record`` can never start: where the lifecycle core sends it (skipped, or failed
        when its dependencies could not be read), written by the leader."""
        end = machine.outcome(record.state, why).state
        if end is not None:
            self.never[record.id] = end
