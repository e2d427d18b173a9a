"""Retries: whether an attempt that ended badly runs again, when, and what the history says.

A job's ``retry`` policy (``model.RetrySpec``) names the causes it covers. A covered failure
re-queues the job with its run recorded ``failed`` (exit code and message kept: each attempt
is a run of the job's history) and, with a backoff, a not-before time stored with the job —
durable, so a restarted scheduler honours it. Once ``limit`` covered failures have been
retried, the next one ends the job ``failed`` with the reason of that last failure. A cause
the policy does not cover is handled as without a policy: a failed command fails the job, a
lost run or an unreachable cluster re-queues it without counting.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from flotilla.backends.interface import BackendRunState, RunStatus
from flotilla.model import RetryCause
from flotilla.store import JobRecord, JobState, RunRecord, RunState, Transition


def cause_of(status: RunStatus) -> RetryCause:
    """The retry cause of a run its backend reports ended badly (failed or lost).

    Killed by a signal (a negative exit code) that was not Flotilla's own stop for a limit
    the job set (``max_runtime``, its memory request: ``RunStatus.over_limit``) is a node
    failure: the machine's OOM killer, a node shutting down, ``kill -9`` from outside.
    """
    if status.state is BackendRunState.LOST:
        return RetryCause.LOST
    killed = status.exit_code is not None and status.exit_code < 0
    if killed and not status.over_limit and "max_runtime" not in status.message:
        return RetryCause.NODE_FAILURE
    return RetryCause.FAILED


@dataclass(frozen=True)
class Failure:
    """An attempt of ``job`` (its latest run) that ended for ``cause``, in words ``reason``."""

    job: JobRecord
    cause: RetryCause
    reason: str
    exit_code: int | None = None
    message: str | None = None


def counted_failures(runs: list[RunRecord]) -> int:
    """Failures already retried or ended: runs recorded ``failed``."""
    return sum(1 for run in runs if run.state is RunState.FAILED)


def after_failure(failure: Failure, earlier: int, now: datetime | None = None) -> Transition | None:
    """The transition the job's retry policy calls for after ``failure`` (``earlier``: the
    failures counted before it): re-queue with a not-before time, or fail for good when the
    limit is reached. ``None`` when the policy does not cover the cause (or there is none):
    the caller then does what it does without retries."""
    job, run = failure.job, failure.job.run
    retry = job.spec.retry
    if retry is None or failure.cause not in retry.on or run is None:
        return None
    count = earlier + 1
    message = failure.message or failure.reason
    if count > retry.limit:
        return Transition(
            job.id,
            JobState.FAILED,
            f"{failure.reason} (attempt {run.attempt}, {failure.cause.value}; "
            f"retry limit of {retry.limit} reached)",
            run.id,
            exit_code=failure.exit_code,
            message=message,
            run_state=RunState.FAILED,
        )
    delay = retry.delay_after(count)
    when = (now or datetime.now(UTC)) + timedelta(seconds=delay)
    reason = (
        f"retry {count} of {retry.limit}: attempt {run.attempt} ended "
        f"({failure.cause.value}: {failure.reason})"
    )
    if delay > 0:
        reason += f"; not before {when.strftime('%Y-%m-%dT%H:%M:%SZ')} ({delay:g}s backoff)"
    return Transition(
        job.id,
        JobState.QUEUED,
        reason,
        run.id,
        exit_code=failure.exit_code,
        message=message,
        run_state=RunState.FAILED,
        not_before=when if delay > 0 else None,
    )
