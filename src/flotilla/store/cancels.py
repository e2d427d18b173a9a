"""Cancels inside one session, as the lifecycle core answers ``CancelRequested``
(``machine.command``): a waiting job is cancelled at once (its ``SetState``, a transition as
the scheduler's are: ``cycle.py``), an active one's ``StopRun`` is recorded as
``cancel_requested`` for the scheduler to stop its run. Its own module because it builds on
both ``jobs.py`` (serials, locks, events) and ``cycle.py`` (transitions), which builds on
``jobs.py``: no import circle.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from flotilla.lifecycle.effects import ReleaseDependents, SetState, StopRun
from flotilla.lifecycle.events import CancelRequested
from flotilla.lifecycle.machine import command
from flotilla.store.bulk import update_rows
from flotilla.store.cycle import apply_transitions
from flotilla.store.jobs import JOBS, event_row, insert_events, lock_jobs, reserve_serials
from flotilla.store.protocol import Transition
from flotilla.store.states import JobState


def cancel_many(session: Session, job_ids: Sequence[str], reason: str, now: datetime) -> list[str]:
    """Cancel jobs in the caller's transaction; an unknown id raises before anything changes.
    Returns the ids, for the caller to read the records back."""
    if not job_ids:
        return []
    serial = reserve_serials(session, len(job_ids))
    jobs = lock_jobs(session, job_ids)
    requested: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    to_cancel: list[Transition] = []
    seen: set[str] = set()
    for offset, job_id in enumerate(job_ids):
        job = jobs[job_id]
        state = JobState(job["state"])
        if job["cancel_requested"] or job_id in seen:
            continue
        seen.add(job_id)
        for effect in command(state, CancelRequested(reason)).effects:
            match effect:
                case StopRun():
                    job.update(cancel_requested=True, serial=serial + offset, updated_at=now)
                    requested.append(job)
                    events.append(event_row(job, now, "cancel_requested", state, state, reason))
                case SetState(state=to, reason=why):
                    to_cancel.append(Transition(job_id, to, why))
                case ReleaseDependents():
                    pass  # the scheduler's dependency gate follows the change feed
    if requested:
        # Only cancel_requested, serial and updated_at change: the reason stays the last
        # transition's.
        update_rows(
            session,
            JOBS,
            [
                {
                    "id": job["id"],
                    "cancel_requested": True,
                    "serial": job["serial"],
                    "updated_at": now,
                }
                for job in requested
            ],
            key="id",
        )
        insert_events(session, events)
    if to_cancel:
        # Serials after the whole batch's: the counter was reserved for all of them.
        apply_transitions(session, to_cancel, now, reserve_serials(session, len(to_cancel)))
    return list(job_ids)
