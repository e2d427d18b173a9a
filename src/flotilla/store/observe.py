"""Telling others what a committed write did to jobs, for metrics that must count every
submission and state change whoever made it (the API's cancels as much as the scheduler's
transitions). Each process counts the writes it commits, so summing replicas counts each
change once.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

TALLY = "flotilla_committed_changes"
"""Key of the per-session tally in ``Session.info`` (a session is one transaction here)."""


@dataclass(frozen=True, slots=True)
class CommittedChanges:
    """What one committed transaction did to jobs."""

    submitted: Mapping[str, int] = field(default_factory=dict)
    """Jobs submitted, per queue."""
    transitions: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """State changes, per (from state, to state); a submission is ``("none", "queued")``."""


class CommitObserver(Protocol):
    """Called after a write transaction committed, on the writer's thread, with what it did.

    It must be quick and must not raise: the write has already happened, so an exception is
    logged and dropped, never reported to the writer."""

    def committed(self, changes: CommittedChanges) -> None: ...


def tally_events(session: Session, events: Sequence[Mapping[str, Any]]) -> None:
    """Count the state changes among events about to be inserted in this transaction."""
    counter: Counter[tuple[str, str]] = session.info.setdefault(TALLY, Counter())
    for event in events:
        old, new = event.get("from_state"), event.get("to_state")
        if new is not None and old != new:
            counter[(old or "none", new)] += 1


def tally_submitted(session: Session, queues: Sequence[str]) -> None:
    submitted: Counter[str] = session.info.setdefault(TALLY + ".submitted", Counter())
    submitted.update(queues)


def take_changes(session: Session) -> CommittedChanges | None:
    """The transaction's tally, removed from the session; None when it changed no job."""
    transitions = session.info.pop(TALLY, None)
    submitted = session.info.pop(TALLY + ".submitted", None)
    if not transitions and not submitted:
        return None
    return CommittedChanges(submitted=dict(submitted or {}), transitions=dict(transitions or {}))


def notify(observers: Sequence[CommitObserver], changes: CommittedChanges) -> None:
    for observer in observers:
        try:
            observer.committed(changes)
        except Exception:  # the write is done; an observer's failure must not undo or hide it
            log.exception("a commit observer failed")
