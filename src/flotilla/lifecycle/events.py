"""The events the lifecycle core steps a job through (``machine.step``).

Each is something that happened to one job, as its interpreter (the service, the simulator)
saw it: no times in them — when something is due is the interpreter's clock's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from flotilla.lifecycle.runs import RunEnd


@dataclass(frozen=True, slots=True)
class Submitted:
    """The job entered the queue: it waits for its dependencies, or is offered."""


@dataclass(frozen=True, slots=True)
class DependencyEnded:
    """A job this one waits for ended (the view holds its new state)."""

    dependency: str


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A scheduling round placed ``placements`` replicas of the job on ``cluster``: a waiting
    job starts a run; a running non-strict gang grows (the engine's growth pass)."""

    cluster: str
    placements: int


@dataclass(frozen=True, slots=True)
class Evicted:
    """A scheduling round preempts the job's run to make room (``reason`` is the round's)."""

    reason: str


@dataclass(frozen=True, slots=True)
class RunStarted:
    """The backend reports the job's run running (or the simulator's startup delay passed)."""


@dataclass(frozen=True, slots=True)
class RunEnded:
    """The job's current run ended as ``status``; ``reason`` in words (``exited with code 3``,
    ``cluster c became unreachable``); ``exit_code`` and ``message`` as the backend said."""

    status: RunEnd
    reason: str = ""
    exit_code: int | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class CancelRequested:
    """A user asked to cancel the job; ``reason`` says who asked (and why), the cancelled
    job's reason when it ends at once."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class HoldRequested:
    """A user asked to hold the queued job (Slurm's ``scontrol hold``): the scheduler passes
    it by until it is released."""

    reason: str


@dataclass(frozen=True, slots=True)
class ReleaseRequested:
    """A user released the held job (Slurm's ``scontrol release``): it waits in the queue
    again."""

    reason: str


@dataclass(frozen=True, slots=True)
class RequeueRequested:
    """A user asked to requeue the job (Slurm's ``scontrol requeue``): its run is stopped and
    the job waits in the queue for a new one. ``reason`` says who asked (and why)."""

    reason: str


@dataclass(frozen=True, slots=True)
class DispatchAccepted:
    """The job's leased run was handed to its cluster's backend, which took it."""

    cluster: str


@dataclass(frozen=True, slots=True)
class DispatchRefused:
    """The backend refused the job's run for good (``rejected by c: …``), or the run could
    not be put together (a secret that cannot be opened)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Faulted:
    """A step of the host about this one job failed with an error of the job's own (its
    spec, its placement, its retry policy: ``failed inside the scheduler (…)``), contained
    so that the other jobs go on."""

    reason: str


@dataclass(frozen=True, slots=True)
class DependencyNeverMet:
    """A dependency of the waiting job ended in a way its condition does not accept: the
    branch not taken (``reason`` names it)."""

    reason: str


class TimerKind(Enum):
    GANG_TIMEOUT = "gang_timeout"
    """A queued gang's ``gang.timeout`` passed since it became schedulable."""
    BACKOFF = "backoff"
    """A re-queued job's retry backoff passed."""


@dataclass(frozen=True, slots=True)
class TimerFired:
    kind: TimerKind


Event = (
    Submitted
    | DependencyEnded
    | Scheduled
    | Evicted
    | RunStarted
    | RunEnded
    | CancelRequested
    | HoldRequested
    | ReleaseRequested
    | RequeueRequested
    | DispatchAccepted
    | DispatchRefused
    | Faulted
    | DependencyNeverMet
    | TimerFired
)

Command = CancelRequested | HoldRequested | ReleaseRequested | RequeueRequested
"""What a user asks of a job: answered from its state alone (``machine.command``), so the
store applies it in the transaction that takes the request, without reading the job's spec."""

Outcome = DispatchAccepted | DispatchRefused | Faulted | DependencyNeverMet
"""What the host saw happen to a job's attempt outside its run: answered from the job's state
alone (``machine.outcome``)."""
