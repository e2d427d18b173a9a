"""Containing a failure to its job: one job's bad value never stalls the loop for everyone.

Every step of the loop that handles one job at a time — a run's report, its retry policy,
its dependencies, its conversion to an engine job, its lease, its dispatch, its cancel — runs
inside ``JobFaults.contain``. An exception there fails that job, with the error as its reason,
logged once, and the loop goes on with the next job. Before, one such exception (a retry
``delay`` of 99,999,999,999 hours overflowing a ``timedelta``) left its step: the rest of that
poll was dropped, and other users' jobs that ended in the same poll stayed ``running`` forever,
across restarts, since the same report failed the same way every time.

What is not one job's fault is not contained: the store's errors (the database unreachable,
the lease lost: the loop retries the cycle or stops leading) and a backend that cannot be
reached (the step is tried again later) propagate as before.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from sqlalchemy.exc import DataError, SQLAlchemyError, StatementError

from flotilla.backends.interface import BackendUnavailable
from flotilla.lifecycle import machine
from flotilla.lifecycle.events import Faulted
from flotilla.store import StoreError, Transition

log = logging.getLogger(__name__)

NOT_CONTAINED = (StoreError, SQLAlchemyError, BackendUnavailable)
"""Errors that are not one job's fault: they leave the step as before."""


def bad_value(error: Exception) -> bool:
    """Whether a failed write was refused for a value it carried (the database's ``DataError``,
    or a value that could not be converted: SQLAlchemy's ``StatementError`` around a
    ``ValueError``), not because the database or the lease is gone: the write is then made
    again job by job, and a job whose own write fails that way fails (``writes.py``)."""
    if isinstance(error, DataError | ValueError | ArithmeticError):
        return True
    return isinstance(error, StatementError) and isinstance(
        error.orig, ValueError | ArithmeticError
    )


class JobFaults:
    """The jobs failed by an error inside the loop, waiting to be recorded ``failed``."""

    def __init__(self) -> None:
        self._failed: dict[str, Transition] = {}
        self._seen: set[str] = set()
        """Jobs already failed this way (logged once, failed once)."""

    @contextlib.contextmanager
    def contain(self, stage: str, job_id: str, run_id: str | None = None) -> Iterator[None]:
        """Run one job's step; an error that is the job's own fails it instead of the loop."""
        try:
            yield
        except NOT_CONTAINED:
            raise
        except Exception as error:
            self.fail(stage, job_id, run_id, error)

    def fail(self, stage: str, job_id: str, run_id: str | None, error: Exception) -> None:
        """Fail the job for ``error`` at the next flush."""
        reason = self.note(stage, job_id, error)
        # The job's state is not at hand here: the core's answer for any job not ended yet
        # (the write skips one that ended meanwhile).
        failed = machine.outcome(None, Faulted(reason)).state
        assert failed is not None
        self._failed[job_id] = Transition(job_id, failed.state, failed.reason, run_id)

    def note(self, stage: str, job_id: str, error: Exception) -> str:
        """Log ``error`` (once per job) and return the reason the job fails with."""
        reason = f"failed inside the scheduler ({stage}): {type(error).__name__}: {error}"
        if job_id not in self._seen:
            log.error("job %s: %s; the job fails, the loop goes on", job_id, reason, exc_info=error)
            self._seen.add(job_id)
            if len(self._seen) > 100_000:  # bounded: only a repeat's log line is at stake
                self._seen.clear()
        return reason

    def take(self) -> list[Transition]:
        """The failures gathered since the last call, to be written."""
        failed, self._failed = self._failed, {}
        return list(failed.values())

    @property
    def pending(self) -> bool:
        return bool(self._failed)
