"""Reconciling a result computed on an old snapshot against the current state (async mode).

While a round was in flight, jobs may have been cancelled, finished or lost with their cluster.
A decision about a job that is no longer waiting is dropped, and with it every decision about
the same gang; an eviction is dropped when its preemptor's decision is, or when the victim no
longer runs; a placement that no longer fits is dropped. What survives can be committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

from flotilla.framework.interfaces import Assignment
from flotilla.framework.snapshot import CycleResult


class CurrentState(Protocol):
    def waiting(self, job: str) -> bool:
        """Queued or preempted now: a decision to start it still makes sense."""
        ...

    def running(self, job: str) -> bool: ...

    def cluster_ready(self, cluster: str) -> bool: ...

    def room_for(self, assignment: Assignment) -> str | None:
        """None when every placement still fits its node now, else why not."""
        ...


@dataclass(frozen=True)
class Reconciled:
    result: CycleResult
    dropped: dict[str, str] = field(default_factory=dict)
    """Job name → why its decision was dropped."""


def reconcile(result: CycleResult, current: CurrentState) -> Reconciled:
    dropped: dict[str, str] = {}
    for decision in result.scheduled:
        name = decision.job.name
        growing = current.running(name)  # a non-strict gang adding members
        if not current.waiting(name) and not growing:
            dropped[name] = "the job is no longer waiting"
        elif not current.cluster_ready(decision.assignment.cluster):
            dropped[name] = f"cluster {decision.assignment.cluster} is not ready"
    gangs = {
        decision.job.gang.name
        for decision in result.scheduled
        if decision.job.name in dropped and decision.job.gang and decision.job.gang.name
    }
    for decision in result.scheduled:
        gang = decision.job.gang
        if gang is not None and gang.name in gangs and decision.job.name not in dropped:
            dropped[decision.job.name] = f"another member of gang {gang.name} changed"
    evictions = tuple(
        eviction
        for eviction in result.preempted
        if eviction.by not in dropped and current.running(eviction.job)
    )
    scheduled = tuple(d for d in result.scheduled if d.job.name not in dropped)
    return Reconciled(replace(result, scheduled=scheduled, preempted=evictions), dropped)
