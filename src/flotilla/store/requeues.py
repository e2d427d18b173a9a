"""Requeue inside one session (Slurm's ``scontrol requeue``): a job that holds a run (leased,
pending, running) moves to preempted with the requester's reason, as the lifecycle core's
``RequeueRequested`` steps; the scheduling loop stops the run and, once it is gone, queues
the job again for a new run (``RunTransitions.stop_requeued``). Written as the scheduler's
transitions are (``cycle.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.orm import Session

from flotilla.lifecycle.effects import SetState
from flotilla.lifecycle.events import RequeueRequested
from flotilla.lifecycle.machine import command
from flotilla.store.cycle import apply_transitions
from flotilla.store.errors import ConflictError
from flotilla.store.jobs import lock_jobs, reserve_serials
from flotilla.store.protocol import Transition
from flotilla.store.states import TERMINAL_JOB_STATES, JobState


def requeue(session: Session, job_ids: Sequence[str], reason: str, now: datetime) -> list[str]:
    """Requeue jobs in the caller's transaction, all or none: an unknown id, or a job that
    ended, raises before anything changes. A job waiting for the scheduler already (queued,
    held, preempted) is left as it is. Returns the ids, for the caller to read back."""
    jobs = lock_jobs(session, job_ids)
    changes: list[Transition] = []
    for job_id in dict.fromkeys(job_ids):
        job = jobs[job_id]
        state = JobState(job["state"])
        if state in TERMINAL_JOB_STATES:
            raise ConflictError(
                f"job {job_id} is {state}: it has ended, so there is no run to requeue "
                "(submit it again to run it once more)"
            )
        if job["cancel_requested"]:
            raise ConflictError(f"job {job_id} is being cancelled: it cannot be requeued")
        # The core's answer: its SetState here, its StopRun by the scheduling loop, which
        # stops the runs of preempted jobs it does not follow yet.
        moved = command(state, RequeueRequested(reason)).state
        if isinstance(moved, SetState):
            changes.append(Transition(job_id, moved.state, moved.reason, job["run_id"]))
    if changes:
        apply_transitions(session, changes, now, reserve_serials(session, len(changes)))
    return list(job_ids)
