"""The loop's job writes, gathered into as few transactions as a cycle allows.

Transitions wait here until the next flush, which writes them — with a cycle's leases, when it
has some — in one fenced transaction (``Store.commit_cycle``) and brings the JobDb up to date
from the change feed read in that same transaction. A cycle makes one such write as a rule:
its leases, with the previous cycle's dispatch outcomes and what the backends reported since.
Only transitions that change what the scheduler sees (a run ended, a job went back to the
queue or failed: ``settling``) are written before it schedules, in a write of their own; a
cycle that leases nothing writes what waits at its end. Dispatch outcomes (``leased →
pending``) thus wait for the next cycle when it is due within ``DEFER_WRITES_SECONDS`` (else
they are written at the cycle's end: ``SchedulingLoop.cycle``); a crash before that leaves the
runs leased, and a new term dispatches them again (idempotent by run id), as a crash between a
dispatch and its record always did.

A write that no longer applies as a whole (a job moved on meanwhile: a user cancelled it, a
late report about an old run) is retried in parts: the transitions together, else one at a
time skipping those that no longer apply, then the leases of the jobs still queued. A write
that fails otherwise (the database is unreachable) keeps its transitions for the next flush:
a backend reports a change once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from flotilla.service.containment import bad_value
from flotilla.service.context import LoopContext
from flotilla.stage_trace import trace
from flotilla.store import (
    CycleWrite,
    IllegalTransitionError,
    JobRecord,
    JobState,
    LeaseLostError,
    RunRequest,
    StaleRunError,
    Transition,
)

log = logging.getLogger(__name__)

STARTED = frozenset({JobState.PENDING, JobState.RUNNING})
"""Transitions that can wait for a cycle's leases (``CycleWrites.settling``)."""

RECORD_ATTEMPTS = 3
"""How often a cycle's leases are retried without the jobs that left the queue meanwhile."""

Absorb = Callable[[int, list[JobRecord]], None]
"""Applies a change feed read after a serial to the JobDb (and what follows it)."""


class CycleWrites:
    def __init__(self, context: LoopContext, absorb: Absorb) -> None:
        self._context = context
        self._absorb = absorb
        self.resume: Callable[[], bool] = lambda: False
        """After the fence refused a write: whether the term goes on (its lease ran out but
        no one took a newer one, ``Leadership.resume``); the write is then made again."""
        self._waiting: list[Transition] = []
        self.flushes = 0
        """Writes made so far (a cycle that made none writes what waits at its end)."""

    @property
    def waiting(self) -> bool:
        """Whether transitions wait for the next flush."""
        return bool(self._waiting) or self._context.faults.pending

    @property
    def settling(self) -> bool:
        """Whether a waiting transition changes what the scheduler sees — a run ended, a job
        went back to the queue or failed — and so must be written before it schedules.
        Reports that runs were dispatched or started change nothing it counts (a leased run
        holds its nodes as a running one does): they can wait for the cycle's leases."""
        return self._context.faults.pending or any(
            change.new_state not in STARTED for change in self._waiting
        )

    def add(self, changes: Iterable[Transition]) -> None:
        """Transitions for the next flush, in order."""
        self._waiting.extend(changes)

    def forget(self) -> None:
        """The lease is gone: nothing this term gathered may be written."""
        self._waiting.clear()
        self._context.faults.take()

    def flush(self, runs: Sequence[RunRequest] = ()) -> list[RunRequest]:
        """Write the waiting transitions, then lease ``runs``, in one transaction, and sync
        the JobDb from it. Returns the leases recorded: all of them, or, when some job left
        the queue meanwhile, those of the jobs still queued."""
        transitions, self._waiting = [*self._waiting, *self._context.faults.take()], []
        if not transitions and not runs:
            return []
        try:
            self._commit(CycleWrite(transitions, runs))
        except (StaleRunError, IllegalTransitionError) as error:
            log.info("a cycle's write no longer applies whole (%s); writing it in parts", error)
        except Exception as error:
            if not bad_value(error):
                self._waiting[:0] = transitions
                raise
            log.warning("a cycle's write was refused (%s); writing it job by job", error)
        else:
            self.flushes += 1
            _committed(transitions)
            return list(runs)
        self.flushes += 1
        self._apply(transitions)
        return self._lease(runs)

    def sync(self) -> None:
        """Bring the JobDb up to date (a read of the change feed)."""
        self._commit(CycleWrite())

    def _commit(self, write: CycleWrite) -> None:
        context = self._context
        since = context.jobdb.serial
        try:
            done = context.store.commit_cycle(
                write, since=since, fence=context.lease, pace=context.pace
            )
        except LeaseLostError:
            if not self.resume():
                raise  # another replica holds a newer term: this one's work is discarded
            done = context.store.commit_cycle(
                write, since=since, fence=context.lease, pace=context.pace
            )
        self._absorb(since, done.changes)

    def _apply(self, transitions: list[Transition]) -> None:
        """The transitions together, else one at a time, skipping those that no longer apply."""
        if not transitions:
            return
        try:
            self._commit(CycleWrite(transitions))
            _committed(transitions)
            return
        except (StaleRunError, IllegalTransitionError):
            pass
        except Exception as error:
            if not bad_value(error):
                raise
        for change in transitions:
            try:
                self._commit(CycleWrite([change]))
                _committed([change])
            except StaleRunError:
                log.info("ignored a report about an old run of job %s", change.job_id)
            except IllegalTransitionError as error:
                # The job moved on since this cycle read it (e.g. its run ended meanwhile).
                log.info("skipped a transition that no longer applies: %s", error)
            except Exception as error:
                if not bad_value(error):
                    raise
                self._refused(change, error)

    def _refused(self, change: Transition, error: Exception) -> None:
        """The job's own change cannot be written: the job fails instead (``containment.py``);
        a failure that cannot be written either is dropped, logged."""
        if change.new_state is JobState.FAILED:
            log.error("job %s: could not record it failed (%s); dropped", change.job_id, error)
            return
        self._context.faults.fail("writing its change", change.job_id, change.run, error)

    def _lease(self, runs: Sequence[RunRequest]) -> list[RunRequest]:
        """A job a cycle counted on may have left ``queued`` since its snapshot (a user
        cancelled it): catch up and lease the jobs still queued — one late cancel must not
        cost every other job its place."""
        for _ in range(RECORD_ATTEMPTS):
            if not runs:
                return []
            try:
                self._commit(CycleWrite(runs=runs))
                return list(runs)
            except IllegalTransitionError as error:
                log.info("a job left the queue while the cycle committed: %s", error)
                self.sync()
                read = self._context.jobdb.read_txn()
                runs = [
                    request
                    for request in runs
                    if (job := read.get(request.job_id)) is not None
                    and job.state is JobState.QUEUED
                ]
            except Exception as error:
                if not bad_value(error):
                    raise
                return self._lease_each(runs)
        return []  # still racing: the next cycle schedules these jobs again

    def _lease_each(self, runs: Sequence[RunRequest]) -> list[RunRequest]:
        """A lease refused for a value it carried: lease job by job; a job whose own lease
        is refused fails (``containment.py``), the others are leased."""
        leased: list[RunRequest] = []
        for request in runs:
            try:
                self._commit(CycleWrite(runs=[request]))
            except (IllegalTransitionError, StaleRunError) as error:
                log.info("a job left the queue while the cycle committed: %s", error)
            except Exception as error:
                if not bad_value(error):
                    raise
                self._context.faults.fail("recording its lease", request.job_id, None, error)
            else:
                leased.append(request)
        return leased


def _committed(transitions: Sequence[Transition]) -> None:
    for change in transitions:
        if change.new_state is JobState.CANCELLED:
            trace("state-committed", change.job_id)
