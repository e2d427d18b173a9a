"""What a job becomes when its run ends: the outcome rules, retries included, and their words.

``machine.step`` asks ``after_run`` when a ``RunEnded`` event comes and answers with its
effects; the service applies them as a store transition (and a not-before time), the
simulator as a state and a timer in virtual time.

A run ends in one of five ways (``RunEnd``). A job's ``retry`` policy names the causes it
covers (``failed``, ``lost``, ``node_failure``); a covered end re-queues the job after its
backoff within ``limit`` counted failures, and fails it past that. An end the policy does not
cover is handled as without a policy: a failed command fails the job, a lost run or a lost
node re-queues it at once without counting. A run that ends after its job's cancel was asked
for ends the job cancelled, whatever it exited with. Pure and clock-free: a backoff is a
number of seconds; the caller says when that is.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from flotilla.lifecycle.states import JobState
from flotilla.model.job import JobSpec
from flotilla.model.retry import RetryCause


class RunEnd(Enum):
    """How a run ended, as the lifecycle tells them apart."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """The command failed (non-zero exit, killed by a signal Flotilla did not send, could not
    start, ``max_runtime``)."""
    NODE_FAILURE = "node_failure"
    """Its machine failed under it: its cluster stopped answering."""
    LOST = "lost"
    """The backend lost track of it."""
    CANCELLED = "cancelled"
    """Stopped by Flotilla (a cancel)."""


CAUSE_OF: dict[RunEnd, RetryCause] = {
    RunEnd.FAILED: RetryCause.FAILED,
    RunEnd.NODE_FAILURE: RetryCause.NODE_FAILURE,
    RunEnd.LOST: RetryCause.LOST,
}
"""The retry cause each bad end is (success and cancel are never retried)."""

CANCELLED_AFTER_REQUEST = "cancelled: the run ended after the cancel request"
SUCCEEDED_REASON = "exited 0"


@dataclass(frozen=True, slots=True)
class EndedAttempt:
    """The job's current run (attempt ``attempt``) ended as ``end``: the input of ``after_run``."""

    end: RunEnd
    reason: str
    """In words, e.g. ``replica main/0 exited with code 3``, ``cluster c became unreachable``."""
    attempt: int
    failures: int = 0
    """Failures its retry policy counted before this one."""
    cancel_requested: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    """Where the job goes: ``state`` (succeeded, failed, cancelled, or queued to run again)
    with ``reason``."""

    state: JobState
    reason: str
    retry: int | None = None
    """The retry this is (1 for the first), when a policy re-queued the job."""
    delay: float = 0.0
    """Seconds the job waits before it may be scheduled again (its backoff)."""
    counted: bool = False
    """Whether the policy counted this end as a failure (the run is then recorded failed)."""

    def with_backoff_note(self, when: str) -> str:
        """The reason, with when the job may run again (``when`` as the caller writes times:
        an ISO time in the service, ``t=12`` in the simulator) once it has a backoff."""
        if self.delay <= 0:
            return self.reason
        return f"{self.reason}; not before {when} ({self.delay:g}s backoff)"


def after_run(spec: JobSpec, ended: EndedAttempt) -> Outcome:
    """What the job becomes after its run ended."""
    if ended.end is RunEnd.SUCCEEDED:
        return Outcome(JobState.SUCCEEDED, ended.reason or SUCCEEDED_REASON)
    if ended.end is RunEnd.CANCELLED:
        return Outcome(JobState.CANCELLED, ended.reason or "cancelled")
    if ended.cancel_requested:
        return Outcome(JobState.CANCELLED, CANCELLED_AFTER_REQUEST)
    cause = CAUSE_OF[ended.end]
    retry = spec.retry
    if retry is None or cause not in retry.on:
        if ended.end is RunEnd.FAILED:
            return Outcome(JobState.FAILED, ended.reason)
        return Outcome(JobState.QUEUED, ended.reason)  # re-queued at once, uncounted
    count = ended.failures + 1
    if count > retry.limit:
        return Outcome(
            JobState.FAILED,
            f"{ended.reason} (attempt {ended.attempt}, {cause.value}; "
            f"retry limit of {retry.limit} reached)",
            counted=True,
        )
    return Outcome(
        JobState.QUEUED,
        f"retry {count} of {retry.limit}: attempt {ended.attempt} ended "
        f"({cause.value}: {ended.reason})",
        retry=count,
        delay=retry.delay_after(count),
        counted=True,
    )
