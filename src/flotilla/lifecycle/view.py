"""What the lifecycle core needs to know of a job: ``JobView``, built by each interpreter
(the service from a ``JobRecord``, the simulator from a ``SimJob``) when an event happens."""

from __future__ import annotations

from dataclasses import dataclass

from flotilla.lifecycle.states import JobState
from flotilla.model.job import DependencyCondition, JobSpec


@dataclass(frozen=True, slots=True)
class DependencyView:
    """One of the job's ``depends_on``, and where the job it names stands."""

    label: str
    """How reasons name it: ``job prep``, ``job q/prep (1a2b3c4d)``."""
    condition: DependencyCondition
    state: str | None
    """Its state's name; None when it is not known (not submitted yet, not seen yet)."""
    unknown: str = "not seen yet"
    """How a waiting reason words a dependency whose state is not known."""


@dataclass(frozen=True, slots=True)
class JobView:
    """A job as the lifecycle core sees it when it steps one event: its spec (retry policy,
    gang, array), its state, its current attempt and what its dependencies are."""

    spec: JobSpec
    state: JobState | None
    """None: not submitted yet."""
    attempt: int = 0
    """The current (or last) run's attempt number, 1 for the first; 0 before any run."""
    failures: int = 0
    """Failures its retry policy counted before now (runs recorded failed)."""
    cancel_requested: bool = False
    placed: int = 0
    """Replicas its current run holds (a non-strict gang may hold fewer than it wants)."""
    cluster: str | None = None
    """The cluster of its current run."""
    dependencies: tuple[DependencyView, ...] = ()
    last_reason: str | None = None
    """The last reason it waited for (a gang that times out names it)."""

    @property
    def name(self) -> str:
        return self.spec.name
