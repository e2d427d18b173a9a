"""The effects the lifecycle core answers an event with (``machine.step``).

The interpreters apply them: the service as store transitions and backend calls, the
simulator to its virtual cluster and clock. An effect says what must happen, never how.
"""

from __future__ import annotations

from dataclasses import dataclass

from flotilla.lifecycle.states import JobState


@dataclass(frozen=True, slots=True)
class SetState:
    """The job moves to ``state`` with ``reason``. ``counted``: the retry policy counted the
    run's end as a failure (the run is recorded failed; its exit code kept)."""

    state: JobState
    reason: str
    counted: bool = False


@dataclass(frozen=True, slots=True)
class Offer:
    """The queued job may be offered to the scheduler (it joins the backlog, subject to its
    array's parallelism, ``arrays.ArrayThrottle``)."""


@dataclass(frozen=True, slots=True)
class WaitForDependencies:
    """The queued job stays out of the backlog until a dependency ends; ``reason`` says
    which it waits for and where each stands."""

    reason: str


@dataclass(frozen=True, slots=True)
class StartRun:
    """Start a run (one attempt) on ``cluster`` with the round's placements."""

    cluster: str
    reason: str


@dataclass(frozen=True, slots=True)
class GrowRun:
    """Add the round's placements to the running run (a non-strict gang growing)."""

    added: int
    placed: int
    """Replicas the run holds after it grew."""
    wanted: int
    reason: str


@dataclass(frozen=True, slots=True)
class StopRun:
    """Ask the run's backend to stop it; its end comes back as a ``RunEnded`` event."""

    reason: str


@dataclass(frozen=True, slots=True)
class HoldUntil:
    """The re-queued job is not offered for ``seconds`` (its retry backoff); the interpreter
    says when that is on its clock, and words the reason with ``note``."""

    seconds: float

    def note(self, reason: str, when: str) -> str:
        """``reason`` with when the job may run again (``when`` as the interpreter writes
        times: an ISO time in the service, ``t=12`` in the simulator)."""
        return f"{reason}; not before {when} ({self.seconds:g}s backoff)"


@dataclass(frozen=True, slots=True)
class FreeArraySlot:
    """The array element left its slot (it ended, or went back to waiting): the elements
    held for its array's parallelism get theirs."""


@dataclass(frozen=True, slots=True)
class ReleaseDependents:
    """The job ended: each job waiting for it steps a ``DependencyEnded`` (it is released,
    or fails when this end does not meet its condition)."""


Effect = (
    SetState
    | Offer
    | WaitForDependencies
    | StartRun
    | GrowRun
    | StopRun
    | HoldUntil
    | FreeArraySlot
    | ReleaseDependents
)
