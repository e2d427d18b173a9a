"""The service's side of a job's lifecycle: a ``JobRecord`` as the lifecycle core's
``JobView``, a backend's report as a ``RunEnded`` event, and the core's answer as a store
transition.

The rules (retry policy, backoff, uncovered causes, a cancel that was asked for, the
re-queue after a preemption) and their words are the lifecycle core's
(``flotilla/lifecycle/machine.py``); here only what is the service's own: a backend's
``RunStatus`` read as a ``RunEnd``, the counted failures read from the job's runs (each
attempt is a run; a counted one is recorded ``failed``, with its exit code and message kept
in the history), and a backoff (``HoldUntil``) turned into a not-before time stored with the
job — durable, so a restarted scheduler honours it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flotilla.backends.interface import BackendRunState, RunStatus, signal_words
from flotilla.lifecycle.events import RunEnded
from flotilla.lifecycle.machine import Transition as Step
from flotilla.lifecycle.runs import CAUSE_OF, RunEnd
from flotilla.lifecycle.view import DependencyView, JobView
from flotilla.model import RetryCause
from flotilla.service import effects
from flotilla.store import JobRecord, JobState, RunRecord, RunState, Transition


def end_of(status: RunStatus) -> RunEnd:
    """How a run its backend reports ended badly (failed or lost) ended.

    A command killed by a signal (a negative exit code: a segfault, the OOM killer,
    ``kill -9 $$``) failed, as a non-zero exit did: it counts against ``retry.limit`` and,
    without a policy that covers ``failed``, fails the job (issue 35: read as the node's
    failure, it was re-queued uncounted, forever). The stops Flotilla asks for keep their own
    ends: a cancel and a preemption end ``cancelled`` or re-queue the job before this is
    asked, ``max_runtime`` and the job's memory request are failures already, and a cluster
    that stops answering is a ``node_failure`` (``cluster_watch.py``).
    """
    if status.state is BackendRunState.LOST:
        return RunEnd.LOST
    return RunEnd.FAILED


def failure_reason(status: RunStatus) -> str:
    """The reason a failed run gives its job: the backend's message, naming the signal that
    killed it when the message does not (``killed by signal 9 (SIGKILL)``) and the signal was
    not Flotilla's own stop for a limit the job set (its message says which)."""
    message = status.message or f"exited {status.exit_code}"
    code = status.exit_code
    ours = status.over_limit or "max_runtime" in message
    if code is not None and code < 0 and not ours and "signal" not in message:
        message = f"{message} (killed by {signal_words(-code)})"
    return message


def cause_of(status: RunStatus) -> RetryCause:
    """The retry cause of a run its backend reports ended badly."""
    return CAUSE_OF[end_of(status)]


def counted_failures(runs: list[RunRecord]) -> int:
    """Failures already retried or ended: runs recorded ``failed``."""
    return sum(1 for run in runs if run.state is RunState.FAILED)


def view_of(
    job: JobRecord,
    *,
    failures: int = 0,
    cancel_requested: bool | None = None,
    last_reason: str | None = None,
    dependencies: tuple[DependencyView, ...] = (),
) -> JobView:
    """What the lifecycle core needs of ``job`` (its counted ``failures`` are the caller's to
    read: only a run's end under a retry policy needs them)."""
    run = job.run
    return JobView(
        spec=job.spec,
        state=job.state,
        attempt=run.attempt if run is not None else 0,
        failures=failures,
        cancel_requested=job.cancel_requested if cancel_requested is None else cancel_requested,
        placed=len(run.assignment.get("placements", [])) if run is not None else 0,
        cluster=run.cluster if run is not None else None,
        dependencies=dependencies,
        last_reason=last_reason,
    )


def change_for(
    job_id: str,
    step: Step,
    run: str | None = None,
    *,
    exit_code: int | None = None,
    message: str | None = None,
) -> Transition | None:
    """The store transition that applies the core's ``SetState`` in ``step`` to ``job_id``
    (its run ``run``), or None when the core moves it nowhere."""
    change = step.state
    if change is None:
        return None
    return Transition(job_id, change.state, change.reason, run, exit_code, message)


def transition_for(
    job: JobRecord,
    step: Step,
    ended: RunEnded,
    run: str | None,
    *,
    now: datetime | None = None,
) -> Transition | None:
    """The store transition that applies the core's answer (``step``) to ``ended`` — the end
    of ``job``'s run ``run`` — or None when it calls for none."""
    change = step.state
    if change is None:
        return None
    if change.state is JobState.SUCCEEDED:
        return Transition(job.id, change.state, change.reason, run, exit_code=0)
    if change.state is JobState.CANCELLED and ended.status is RunEnd.CANCELLED:
        return Transition(job.id, change.state, change.reason, run)
    if not change.counted:
        if change.state is JobState.QUEUED:
            return Transition(job.id, change.state, change.reason, run)
        return Transition(
            job.id,
            change.state,
            change.reason,
            run,
            exit_code=ended.exit_code,
            message=ended.message,
        )
    not_before = None
    reason = change.reason
    hold = effects.read(step).hold
    if change.state is JobState.QUEUED and hold is not None:
        not_before = (now or datetime.now(UTC)) + timedelta(seconds=hold.seconds)
        reason = hold.note(reason, not_before.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return Transition(
        job.id,
        change.state,
        reason,
        run,
        exit_code=ended.exit_code,
        message=ended.message or ended.reason,
        run_state=RunState.FAILED,
        not_before=not_before,
    )
