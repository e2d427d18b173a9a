"""JobDb: the scheduler's in-memory jobs, with write transactions and O(1) read snapshots.

As in Armada, the scheduling loop reads a snapshot (``read_txn``) that never changes under it,
and applies changes in a write transaction (``write_txn``) that becomes visible to later
snapshots only on commit. The state is persistent: HAMT maps (``immutables.Map``) for jobs by
id and the state sets, and copy-on-write sorted tuples for each queue's order, so taking a
snapshot is one reference copy and a commit costs what it changed, not the size of the db.
``sync`` keeps it up to date from the store by serial.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType

from immutables import Map, MapMutation

from flotilla.jobdb.ordered import OrderedEdit, QueueKey
from flotilla.store import JobRecord, JobState, Store

IdSet = Map[str, None]
"""A persistent set of job ids."""

EMPTY_IDS: IdSet = Map()


def queue_key(job: JobRecord) -> QueueKey:
    return (-job.priority, job.submit_serial, job.id)


@dataclass(frozen=True, slots=True)
class _State:
    jobs: Map[str, JobRecord]
    by_state: Map[JobState, IdSet]
    by_queue: Map[tuple[str, JobState], tuple[QueueKey, ...]]
    serial: int


EMPTY = _State(jobs=Map(), by_state=Map(), by_queue=Map(), serial=0)


class ReadTxn:
    """A consistent view of the jobs at one moment; it never changes."""

    def __init__(self, state: _State) -> None:
        self._state = state

    @property
    def serial(self) -> int:
        """The store serial this view is synced up to."""
        return self._state.serial

    def get(self, job_id: str) -> JobRecord | None:
        return self._state.jobs.get(job_id)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._state.jobs

    def __len__(self) -> int:
        return len(self._state.jobs)

    def __iter__(self) -> Iterator[JobRecord]:
        return iter(self._state.jobs.values())

    def ids_in_state(self, state: JobState) -> IdSet:
        return self._state.by_state.get(state, EMPTY_IDS)

    def jobs_in_state(self, state: JobState) -> list[JobRecord]:
        jobs = self._state.jobs
        return [jobs[job_id] for job_id in self.ids_in_state(state)]

    def count(self, state: JobState) -> int:
        return len(self.ids_in_state(state))

    def _ordered(self, queue: str, state: JobState) -> tuple[QueueKey, ...]:
        return self._state.by_queue.get((queue, state), ())

    def jobs_in_queue(
        self, queue: str, states: Sequence[JobState] = (JobState.QUEUED,)
    ) -> list[JobRecord]:
        """The queue's jobs in these states, highest priority first, then by submission."""
        jobs = self._state.jobs
        if len(states) == 1:
            keys: Iterable[QueueKey] = self._ordered(queue, states[0])
        else:
            keys = heapq.merge(*(self._ordered(queue, state) for state in states))
        return [jobs[key[2]] for key in keys]

    def queues(self) -> set[str]:
        """Names of the queues that have jobs in this view."""
        return {queue for queue, _ in self._state.by_queue}

    def count_by_queue(self, states: Sequence[JobState]) -> dict[str, int]:
        """Jobs in these states per queue, from the ordered indexes: O(queues), not O(jobs),
        so per-cycle gauges stay cheap with a large backlog."""
        wanted = set(states)
        counts: dict[str, int] = {}
        for (queue, state), ordered in self._state.by_queue.items():
            if state in wanted:
                counts[queue] = counts.get(queue, 0) + len(ordered)
        return counts


class WriteTxn(ReadTxn):
    """Changes on top of the snapshot it started from; reads see them at once, other readers
    only after ``commit``. Use as a context manager: commit on success, abort on error."""

    def __init__(self, db: JobDb, state: _State, *, dry_run: bool) -> None:
        super().__init__(state)
        self._db = db
        self._dry_run = dry_run
        self._edits: dict[tuple[str, JobState], OrderedEdit] = {}
        self._done = False

    def _ordered(self, queue: str, state: JobState) -> tuple[QueueKey, ...]:
        edit = self._edits.get((queue, state))
        return edit.result() if edit is not None else super()._ordered(queue, state)

    def _edit(self, queue: str, state: JobState) -> OrderedEdit:
        key = (queue, state)
        edit = self._edits.get(key)
        if edit is None:
            edit = self._edits[key] = OrderedEdit(self._state.by_queue.get(key, ()))
        return edit

    def upsert(self, records: Iterable[JobRecord]) -> None:
        """Insert or replace jobs; an older version (lower serial) never replaces a newer."""
        self._check_open()
        state = self._state
        jobs = state.jobs.mutate()
        by_state = state.by_state.mutate()
        serial = state.serial
        for record in records:
            old = jobs.get(record.id)
            if old is not None:
                if old.serial > record.serial:
                    continue
                self._unindex(old, by_state)
            jobs[record.id] = record
            ids = by_state.get(record.state, EMPTY_IDS)
            by_state[record.state] = ids.set(record.id, None)
            self._edit(record.queue, record.state).add(queue_key(record))
            serial = max(serial, record.serial)
        self._state = _State(jobs.finish(), by_state.finish(), state.by_queue, serial)

    def advance(self, serial: int) -> None:
        """Record that the store has been read up to ``serial`` (never moves back)."""
        self._check_open()
        state = self._state
        if serial > state.serial:
            self._state = _State(state.jobs, state.by_state, state.by_queue, serial)

    def delete(self, job_ids: Iterable[str]) -> None:
        """Forget jobs (for example finished ones the scheduler no longer needs)."""
        self._check_open()
        state = self._state
        jobs = state.jobs.mutate()
        by_state = state.by_state.mutate()
        for job_id in job_ids:
            old = jobs.get(job_id)
            if old is not None:
                self._unindex(old, by_state)
                del jobs[job_id]
        self._state = _State(jobs.finish(), by_state.finish(), state.by_queue, state.serial)

    def _unindex(self, old: JobRecord, by_state: MapMutation[JobState, IdSet]) -> None:
        by_state[old.state] = by_state.get(old.state, EMPTY_IDS).delete(old.id)
        self._edit(old.queue, old.state).remove(queue_key(old))

    def commit(self) -> None:
        """Publish the changes to later snapshots. A dry-run transaction cannot commit."""
        self._check_open()
        if self._dry_run:
            raise RuntimeError("a dry-run transaction cannot commit")
        by_queue = self._state.by_queue.mutate()
        for key, edit in self._edits.items():
            ordered = edit.result()
            if ordered:
                by_queue[key] = ordered
            elif key in by_queue:
                del by_queue[key]
        self._state = _State(
            self._state.jobs, self._state.by_state, by_queue.finish(), self._state.serial
        )
        self._edits = {}
        self._db._publish(self._state)
        self._finish()

    def abort(self) -> None:
        """Discard the changes. Safe to call after commit or abort."""
        if not self._done:
            self._finish()

    def _finish(self) -> None:
        self._done = True
        if not self._dry_run:
            self._db._writer.release()

    def _check_open(self) -> None:
        if self._done:
            raise RuntimeError("transaction already committed or aborted")

    def __enter__(self) -> WriteTxn:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None and not self._done and not self._dry_run:
            self.commit()
        else:
            self.abort()


class JobDb:
    """In-memory jobs. Any number of readers; one write transaction at a time (others wait)."""

    def __init__(self) -> None:
        self._state = EMPTY
        self._writer = threading.Lock()

    @classmethod
    def load(
        cls, store: Store, page: int = 1000, keep: Callable[[JobRecord], bool] | None = None
    ) -> JobDb:
        """A JobDb holding every job of the store (those ``keep`` accepts, if given)."""
        db = cls()
        db._apply(store, page, keep, None)
        return db

    def read_txn(self) -> ReadTxn:
        """A snapshot: O(1) to take, unaffected by later commits."""
        return ReadTxn(self._state)

    def write_txn(self) -> WriteTxn:
        """Start the (only) write transaction; blocks while another one is open."""
        self._writer.acquire()
        return WriteTxn(self, self._state, dry_run=False)

    def dry_run_txn(self) -> WriteTxn:
        """A private write transaction that can never commit (Armada's DryRunTxn): the async
        scheduling algorithm works in one beside the main loop's real transactions."""
        return WriteTxn(self, self._state, dry_run=True)

    @property
    def serial(self) -> int:
        return self._state.serial

    def sync(self, store: Store, page: int = 1000) -> int:
        """Apply every job the store changed since the last sync, in one transaction; returns
        how many records were applied."""
        return len(self.sync_changes(store, page))

    def sync_changes(
        self, store: Store, page: int = 1000, keep: Callable[[JobRecord], bool] | None = None
    ) -> list[JobRecord]:
        """Like ``sync``, but returns the records applied, oldest first: the change feed that
        lets a reader keep derived state (the scheduler's engine jobs) up to date without
        rescanning every job.

        ``keep``: a record it refuses (a job finished long ago) is not held — an older
        version of the job is dropped instead — but still returned in the change feed, and
        the serial still moves past it."""
        changed: list[JobRecord] = []
        self._apply(store, page, keep, changed)
        return changed

    def apply_feed(
        self,
        since: int,
        records: Sequence[JobRecord],
        keep: Callable[[JobRecord], bool] | None = None,
    ) -> list[JobRecord]:
        """Apply a change feed read elsewhere — every job whose serial was above ``since``,
        by serial (``Store.commit_cycle`` reads it in the writer's own transaction) — as
        ``sync_changes`` would; returns the records applied. Records this JobDb already has
        (at or below its serial) are skipped; a feed that starts after its serial would leave
        a gap, and raises ``ValueError``."""
        with self.write_txn() as txn:
            if since > txn.serial:
                raise ValueError(f"a change feed after serial {since} skips past {txn.serial}")
            fresh = [record for record in records if record.serial > txn.serial]
            if fresh:
                self._take(txn, fresh, keep)
            return fresh

    def _apply(
        self,
        store: Store,
        page: int,
        keep: Callable[[JobRecord], bool] | None,
        changed: list[JobRecord] | None,
    ) -> None:
        """Read the store's changes page by page into one write transaction; each page's
        records are appended to ``changed`` if given (else dropped once applied)."""
        with self.write_txn() as txn:
            while True:
                records = store.jobs_since(txn.serial, page)
                if not records:
                    break
                self._take(txn, records, keep)
                if changed is not None:
                    changed.extend(records)

    @staticmethod
    def _take(
        txn: WriteTxn, records: Sequence[JobRecord], keep: Callable[[JobRecord], bool] | None
    ) -> None:
        """Hold the records ``keep`` accepts (all without it), drop the jobs of the others,
        and move the serial past them all."""
        if keep is None:
            txn.upsert(records)
        else:
            txn.upsert([record for record in records if keep(record)])
            txn.delete(record.id for record in records if not keep(record))
            txn.advance(records[-1].serial)

    def _publish(self, state: _State) -> None:
        self._state = state
