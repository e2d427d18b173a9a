"""The service's side of a run's end: what a backend's report is to the lifecycle core, and
the core's outcome as a store transition.

The rules (retry policy, backoff, uncovered causes, a cancel that was asked for) and their
words are the lifecycle core's (``flotilla/lifecycle/runs.py``); here only what is the
service's own: a backend's ``RunStatus`` read as a ``RunEnd``, the counted failures read from
the job's runs (each attempt is a run; a counted one is recorded ``failed``, with its exit code
and message kept in the history), and a backoff turned into a not-before time stored with the
job — durable, so a restarted scheduler honours it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flotilla.backends.interface import BackendRunState, RunStatus
from flotilla.lifecycle.runs import CAUSE_OF, Outcome, RunEnd, RunEnded
from flotilla.model import RetryCause
from flotilla.store import JobRecord, JobState, RunRecord, RunState, Transition


def end_of(status: RunStatus) -> RunEnd:
    """How a run its backend reports ended badly (failed or lost) ended.

    Killed by a signal (a negative exit code) that was not Flotilla's own stop for a limit
    the job set (``max_runtime``, its memory request: ``RunStatus.over_limit``) is a node
    failure: the machine's OOM killer, a node shutting down, ``kill -9`` from outside.
    """
    if status.state is BackendRunState.LOST:
        return RunEnd.LOST
    killed = status.exit_code is not None and status.exit_code < 0
    if killed and not status.over_limit and "max_runtime" not in status.message:
        return RunEnd.NODE_FAILURE
    return RunEnd.FAILED


def cause_of(status: RunStatus) -> RetryCause:
    """The retry cause of a run its backend reports ended badly."""
    return CAUSE_OF[end_of(status)]


def counted_failures(runs: list[RunRecord]) -> int:
    """Failures already retried or ended: runs recorded ``failed``."""
    return sum(1 for run in runs if run.state is RunState.FAILED)


def transition_for(
    job: JobRecord,
    outcome: Outcome,
    ended: RunEnded,
    run: str | None,
    *,
    exit_code: int | None = None,
    message: str | None = None,
    now: datetime | None = None,
) -> Transition:
    """The store transition that applies the core's ``outcome`` of ``ended`` to ``job`` (its
    run ``run`` ended with ``exit_code`` and ``message``)."""
    if outcome.state is JobState.SUCCEEDED:
        return Transition(job.id, JobState.SUCCEEDED, outcome.reason, run, exit_code=0)
    if not outcome.counted:
        if outcome.state is JobState.QUEUED:
            return Transition(job.id, JobState.QUEUED, outcome.reason, run)
        return Transition(
            job.id, outcome.state, outcome.reason, run, exit_code=exit_code, message=message
        )
    not_before = None
    reason = outcome.reason
    if outcome.state is JobState.QUEUED and outcome.delay > 0:
        not_before = (now or datetime.now(UTC)) + timedelta(seconds=outcome.delay)
        reason = outcome.with_backoff_note(not_before.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return Transition(
        job.id,
        outcome.state,
        reason,
        run,
        exit_code=exit_code,
        message=message or ended.reason,
        run_state=RunState.FAILED,
        not_before=not_before,
    )
