"""Hold and release inside one session (Slurm's ``scontrol hold`` / ``release``): a queued job
is held, and the scheduler passes it by; a held job is released back to queued. Both are the
lifecycle core's answers (``HoldRequested``, ``ReleaseRequested``: ``machine.command``),
written as the scheduler's transitions are (``cycle.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.orm import Session

from flotilla.lifecycle.events import HoldRequested, ReleaseRequested
from flotilla.lifecycle.machine import command
from flotilla.store.cycle import apply_transitions
from flotilla.store.errors import ConflictError
from flotilla.store.jobs import lock_jobs, reserve_serials
from flotilla.store.protocol import Transition
from flotilla.store.states import JobState

_FROM: dict[JobState, JobState] = {JobState.HELD: JobState.QUEUED, JobState.QUEUED: JobState.HELD}
"""The state each move takes a job from, by the state it takes it to."""


def move(
    session: Session, job_ids: Sequence[str], to: JobState, reason: str, now: datetime
) -> list[str]:
    """Hold (``to`` held) or release (``to`` queued) jobs in the caller's transaction, all or
    none: an unknown id, or a job in another state, raises before anything changes. A job
    already in ``to`` is left as it is. Returns the ids, for the caller to read back."""
    wanted = _FROM[to]
    jobs = lock_jobs(session, job_ids)
    changes: list[Transition] = []
    for job_id in dict.fromkeys(job_ids):
        state = JobState(jobs[job_id]["state"])
        if state is to:
            continue
        asked = HoldRequested(reason) if to is JobState.HELD else ReleaseRequested(reason)
        moved = command(state, asked).state
        if moved is None:
            verb = "held" if to is JobState.HELD else "released"
            raise ConflictError(f"job {job_id} is {state}: only a {wanted} job can be {verb}")
        changes.append(Transition(job_id, moved.state, moved.reason))
    if changes:
        apply_transitions(session, changes, now, reserve_serials(session, len(changes)))
    return list(job_ids)
