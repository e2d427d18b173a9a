"""The job and run state machines, in one table the store enforces on every write.

A job moves queued → leased → pending → running → succeeded | failed | cancelled | preempted.
A preempted job, or one whose lease or run is lost before it finishes, may go back to queued and
get a new run: a run is one attempt, so its state only ever moves forward and ends once.
A queued job may be held (``flotilla hold``, Slurm's ``scontrol hold``): the scheduler passes
it by until it is released back to queued.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    QUEUED = "queued"
    HELD = "held"
    """Kept out of scheduling until released (``flotilla release``); never started."""
    LEASED = "leased"
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    SKIPPED = "skipped"
    """Never started: a dependency ended in a way its condition does not accept (the branch
    not taken). An end, but not a failure: ``flotilla wait`` counts it as done."""


class RunState(StrEnum):
    LEASED = "leased"
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    RETURNED = "returned"
    """The job went back to queued before this attempt finished (lease returned, cluster lost)."""


TERMINAL_JOB_STATES: frozenset[JobState] = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.SKIPPED}
)
"""States a job never leaves. Preempted is not one of them: a preempted job may requeue."""

ACTIVE_JOB_STATES: frozenset[JobState] = frozenset(
    {JobState.LEASED, JobState.PENDING, JobState.RUNNING}
)
"""States in which the job has exactly one active run."""

WAITING_JOB_STATES: frozenset[JobState] = frozenset({JobState.QUEUED, JobState.PREEMPTED})
"""States in which a job waits for the scheduler (a preempted job waits to be requeued)."""

JOB_STATE_ORDER: tuple[JobState, ...] = (
    JobState.QUEUED,
    JobState.HELD,
    JobState.LEASED,
    JobState.PENDING,
    JobState.RUNNING,
    JobState.PREEMPTED,
    JobState.SUCCEEDED,
    JobState.FAILED,
    JobState.CANCELLED,
    JobState.SKIPPED,
)
"""Every job state, in the order a person reads them (lists, filters, counts)."""

SUCCESSFUL_JOB_STATES: frozenset[JobState] = frozenset({JobState.SUCCEEDED, JobState.SKIPPED})
"""Ends that are not failures: what ``flotilla wait`` exits 0 for."""

TERMINAL_STATE_NAMES: frozenset[str] = frozenset(state.value for state in TERMINAL_JOB_STATES)
"""The terminal states by name: what the SDK, the CLI, the dashboard (through the API) and the
simulator (whose states share the service's names) compare against."""

WAITING_STATE_NAMES: frozenset[str] = frozenset(state.value for state in WAITING_JOB_STATES)

ACTIVE_STATE_NAMES: frozenset[str] = frozenset(state.value for state in ACTIVE_JOB_STATES)
"""The states of a job that holds a run, by name: what a scenario calls ``running``."""

SUCCESSFUL_STATE_NAMES: frozenset[str] = frozenset(state.value for state in SUCCESSFUL_JOB_STATES)

ACTIVE_RUN_STATES: frozenset[RunState] = frozenset(
    {RunState.LEASED, RunState.PENDING, RunState.RUNNING}
)

JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset(
        {JobState.LEASED, JobState.HELD, JobState.CANCELLED, JobState.FAILED, JobState.SKIPPED}
    ),
    JobState.HELD: frozenset(
        {JobState.QUEUED, JobState.CANCELLED, JobState.FAILED, JobState.SKIPPED}
    ),
    JobState.LEASED: frozenset(
        {
            JobState.PENDING,
            JobState.RUNNING,
            JobState.QUEUED,
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.PREEMPTED,
        }
    ),
    JobState.PENDING: frozenset(
        {
            JobState.RUNNING,
            JobState.QUEUED,
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.PREEMPTED,
        }
    ),
    JobState.RUNNING: frozenset(
        {
            JobState.QUEUED,
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.PREEMPTED,
        }
    ),
    JobState.PREEMPTED: frozenset({JobState.QUEUED, JobState.CANCELLED, JobState.FAILED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
    JobState.SKIPPED: frozenset(),
}
"""Allowed moves. Only a queued job is held: a preempted one may still hold its old run's
resources until that run stops, and release makes a job queued. Leased and pending may jump
straight to an end: a backend may report a short job's outcome before the store hears it
started. Leasing happens through
``Store.record_run`` (it creates the run), never through ``transition``."""

RUN_STATE_FOR_JOB: dict[JobState, RunState] = {
    JobState.LEASED: RunState.LEASED,
    JobState.PENDING: RunState.PENDING,
    JobState.RUNNING: RunState.RUNNING,
    JobState.SUCCEEDED: RunState.SUCCEEDED,
    JobState.FAILED: RunState.FAILED,
    JobState.CANCELLED: RunState.CANCELLED,
    JobState.PREEMPTED: RunState.PREEMPTED,
    JobState.QUEUED: RunState.RETURNED,
}
"""What the active run becomes when its job moves to a state."""


def is_allowed(old: JobState, new: JobState) -> bool:
    return new in JOB_TRANSITIONS[old]
