"""``SqlStore``: the ``Store`` protocol on SQLAlchemy 2, for SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import Engine, func, select
from sqlalchemy.engine import URL
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from flotilla.faults import crash_point
from flotilla.model import ClusterSpec, JobSpec, NodeGroup, QueueSpec, QuotaSpec
from flotilla.model.gpu_use import GpuUse
from flotilla.model.owner_uids import OwnerUid, OwnerUidRequest
from flotilla.model.run_resources import RunResources
from flotilla.store import (
    cancels,
    catalog,
    checkpoints,
    cycle,
    feed,
    fleet,
    holds,
    jobs,
    leases,
    lookup,
    requeues,
    wake,
)
from flotilla.store.convert import (
    SpecCache,
    event_record,
    job_record,
    run_record,
)
from flotilla.store.engine import (
    DEFAULT_URL,
    READ_ONLY_OPTION,
    SchemaStatus,
    make_engine,
    schema_status,
    upgrade,
)
from flotilla.store.errors import InvalidJobError, NotFoundError
from flotilla.store.gpu_use import gpu_use_of, record_gpu_use
from flotilla.store.observe import CommitObserver, notify, take_changes
from flotilla.store.owner_uids import owner_uid, owner_uids
from flotilla.store.protocol import (
    CheckpointReport,
    CycleCommit,
    CycleWrite,
    RunRequest,
    Transition,
)
from flotilla.store.records import (
    ClusterRecord,
    EventRecord,
    FleetChange,
    FleetRecord,
    JobPage,
    JobRecord,
    Lease,
    NodeRecord,
    RunRecord,
)
from flotilla.store.run_report import (
    RunReportQuery,
    RunReportRow,
    record_run_resources,
    run_report,
)
from flotilla.store.schema import Cluster, Event, Job, Node, Run
from flotilla.store.states import JobState
from flotilla.store.usage import UsageQuery, UsageReport, compute_usage, decayed_usage

Clock = Callable[[], datetime]

log = logging.getLogger(__name__)


_T = TypeVar("_T")

UPSERT_TRIES = 3
OWNER_UID_TRIES = 32
"""Tries to give a new owner a uid while other writers give theirs (``owner_uid``)."""
"""Tries of a write that creates rows other replicas may create at the same moment."""


def system_clock() -> datetime:
    return datetime.now(UTC)


class SqlStore:
    """The store on a SQLAlchemy engine. ``clock`` stamps every write; when not given, job
    times come from this host and lease times from the database server (PostgreSQL), so
    replicas on hosts with skewed clocks still agree on when a lease expires."""

    def __init__(self, engine: Engine, *, clock: Clock | None = None) -> None:
        self.engine = engine
        self._clock = clock
        reading: dict[str, Any] = {READ_ONLY_OPTION: True}
        if engine.dialect.name == "postgresql":
            # Each statement its own snapshot, as READ COMMITTED gives the statements of a
            # transaction anyway: a read is then one round trip, not BEGIN, it and ROLLBACK.
            reading["isolation_level"] = "AUTOCOMMIT"
        self._sessions = sessionmaker(engine.execution_options(**reading), expire_on_commit=False)
        """Read-only sessions (never committed); on SQLite they do not take the write lock."""
        self._writers = sessionmaker(engine, expire_on_commit=False)
        self._specs = SpecCache()
        self._observers: list[CommitObserver] = []
        self._origin = uuid.uuid4().hex
        """Names this store's wake notifications, so its own listener skips them."""
        self._wake_sockets = (
            wake.socket_directory(engine.url.database) if engine.dialect.name == "sqlite" else None
        )
        """SQLite: where the schedulers of other processes listen (``wake.py``)."""
        self._wake_sender = (
            wake.SocketWakeSender(self._wake_sockets, self._origin)
            if self._wake_sockets is not None
            else None
        )

    @classmethod
    def open(cls, url: str | URL = DEFAULT_URL, *, clock: Clock | None = None) -> SqlStore:
        """Connect and upgrade the schema to the latest migration."""
        engine = make_engine(url)
        upgrade(engine)
        return cls(engine, clock=clock)

    def close(self) -> None:
        self.engine.dispose()

    def add_observer(self, observer: CommitObserver) -> None:
        """Tell ``observer`` what each committed write did to jobs (``observe.py``)."""
        self._observers.append(observer)

    def listen_for_wakes(self, on_wake: Callable[[], None]) -> wake.WakeListener:
        """Call ``on_wake`` when another process commits a submission or a cancel (``wake.py``:
        its contract and what a lost notification costs)."""
        if self.engine.dialect.name == "postgresql":
            return wake.PostgresWakes(self.engine, self._origin, on_wake)
        directory = self._wake_sockets
        if directory is None:
            return wake.NoWakes()
        if not wake.can_listen(directory, self._origin):
            log.info(
                "%s is too long a path for a wake socket: a scheduler in another process "
                "finds this one's submissions at its next cycle",
                directory,
            )
            return wake.NoWakes()
        return wake.SocketWakes(directory, self._origin, on_wake)

    @contextmanager
    def _write(self, *, announce: bool = False) -> Iterator[Session]:
        """A write transaction; ``announce``: wake the schedulers of other processes once it
        commits (a submission, a cancel). The notification is queued first, before the
        write takes the serial counter, so its round trip does not lengthen the time every
        other writer waits for that lock; the server sends it only if the write commits."""
        with self._writers.begin() as session:
            if announce:
                wake.announce(session, self._origin)
            yield session
            changes = take_changes(session)
        if announce and self._wake_sender is not None:  # SQLite: only once it committed
            self._wake_sender.send()
        if changes is not None and self._observers:  # only once the commit succeeded
            notify(self._observers, changes)

    def _upsert(self, write: Callable[[Session], _T], tries: int = UPSERT_TRIES) -> _T:
        """``write`` in a write transaction, run again when it lost a race to create a row
        (an ``IntegrityError``: a primary key another replica inserted between this one's
        look-up and its insert). Replicas started together on a fresh PostgreSQL database
        registered the same cluster at once, and one crashed on ``pk_clusters``; on the
        second try the row is there and is updated."""
        for attempt in range(tries):
            try:
                with self._write() as session:
                    return write(session)
            except IntegrityError:
                if attempt == tries - 1:
                    raise
                log.info("a concurrent writer created the same row first; writing again")
        raise AssertionError("unreachable")

    def _now(self) -> datetime:
        return (self._clock or system_clock)()

    def _lease_now(self, session: Session) -> datetime:
        if self._clock is None and session.get_bind().dialect.name == "postgresql":
            now: datetime = session.execute(select(func.clock_timestamp())).scalar_one()
            return now.astimezone(UTC)
        return self._now()

    def _fence(self, session: Session, fence: Lease | None) -> None:
        if fence is None:
            return
        server_clock = self._clock is None and session.get_bind().dialect.name == "postgresql"
        leases.check_fence(session, fence, None if server_clock else self._now())

    # Jobs ---------------------------------------------------------------------------------
    def submit_jobs(
        self,
        batch: Sequence[JobSpec],
        *,
        owner: str | None = None,
        pace: Callable[[], None] | None = None,
    ) -> list[str]:
        try:
            with self._write(announce=True) as session:
                return jobs.submit(session, batch, owner, self._now(), pace)
        except IntegrityError as error:
            raise InvalidJobError(
                f"batch conflicts with a concurrent change (nothing was submitted): {error.orig}"
            ) from error

    def cancel(self, job_id: str, reason: str) -> JobRecord:
        return self.cancel_many([job_id], reason)[0]

    def cancel_many(self, job_ids: Sequence[str], reason: str) -> list[JobRecord]:
        with self._write(announce=True) as session:
            touched = cancels.cancel_many(session, job_ids, reason, self._now())
            return self._read_records(session, touched)

    def hold_many(self, job_ids: Sequence[str], reason: str) -> list[JobRecord]:
        with self._write(announce=True) as session:
            touched = holds.move(session, job_ids, JobState.HELD, reason, self._now())
            return self._read_records(session, touched)

    def release_many(self, job_ids: Sequence[str], reason: str) -> list[JobRecord]:
        with self._write(announce=True) as session:
            touched = holds.move(session, job_ids, JobState.QUEUED, reason, self._now())
            return self._read_records(session, touched)

    def requeue_many(self, job_ids: Sequence[str], reason: str) -> list[JobRecord]:
        with self._write(announce=True) as session:
            touched = requeues.requeue(session, job_ids, reason, self._now())
            return self._read_records(session, touched)

    def set_priority(self, job_id: str, priority: int, reason: str = "") -> JobRecord:
        with self._write() as session:
            job = jobs.set_priority(session, job_id, priority, reason, self._now())
            return self._record(session, job)

    def queue_position(self, job_id: str) -> int | None:
        with self._sessions() as session:
            return jobs.queue_position(session, job_id)

    def job_counts(self) -> dict[str, dict[str, int]]:
        with self._sessions() as session:
            return jobs.job_counts(session)

    def schema_status(self) -> SchemaStatus:
        return schema_status(self.engine)

    def transition(
        self,
        job_id: str,
        new_state: JobState,
        reason: str,
        *,
        run: str | None = None,
        exit_code: int | None = None,
        message: str | None = None,
        fence: Lease | None = None,
    ) -> JobRecord:
        change = Transition(job_id, new_state, reason, run, exit_code, message)
        return self.transition_many([change], fence=fence)[0]

    def transition_many(
        self,
        changes: Sequence[Transition],
        *,
        fence: Lease | None = None,
        records: bool = True,
    ) -> list[JobRecord]:
        with self._write() as session:
            self._fence(session, fence)
            touched = cycle.apply_transitions(session, changes, self._now())
            return self._read_records(session, touched) if records else []

    def record_run(
        self,
        job_id: str,
        cluster: str,
        assignment: Mapping[str, Any],
        *,
        reason: str = "scheduled",
        fence: Lease | None = None,
    ) -> RunRecord:
        return self.record_runs([RunRequest(job_id, cluster, assignment, reason)], fence=fence)[0]

    def record_runs(
        self, requests: Sequence[RunRequest], *, fence: Lease | None = None
    ) -> list[RunRecord]:
        with self._write() as session:
            self._fence(session, fence)
            return cycle.create_runs(session, requests, self._now())

    def grow_run(
        self,
        job_id: str,
        run_id: str,
        assignment: Mapping[str, Any],
        reason: str,
        *,
        fence: Lease | None = None,
    ) -> JobRecord:
        with self._write() as session:
            self._fence(session, fence)
            cycle.grow_run(session, job_id, run_id, assignment, reason, self._now())
            return self._read_records(session, [job_id])[0]

    def record_checkpoints(
        self, reports: Sequence[CheckpointReport], *, fence: Lease | None = None
    ) -> None:
        if not reports:
            return
        with self._write() as session:
            self._fence(session, fence)
            checkpoints.record(session, reports, self._now())

    def commit_cycle(
        self,
        write: CycleWrite,
        *,
        since: int,
        fence: Lease | None = None,
        pace: Callable[[], None] | None = None,
    ) -> CycleCommit:
        """The feed is read as rows inside the transaction (once the serial counter is locked
        every earlier writer has committed and no later one can commit first, so the rows
        after ``since`` are exactly the feed up to this write) and made records after the
        commit, so the counter's lock is not held while specs are parsed."""
        if not write:
            with self._sessions() as session:
                found = feed.rows_since(session, since, None)
            return CycleCommit(runs=[], changes=feed.to_records(found, self._specs, pace))
        with self._write() as session:
            self._fence(session, fence)
            applied = cycle.start(session, write.transitions, write.runs, self._now(), None)
            applied.write_runs(session)
            if write.runs:
                crash_point("mid-cycle-write")
            applied.write_jobs(session)
            found = feed.rows_since(session, since, None)
        return CycleCommit(runs=applied.new_runs, changes=feed.to_records(found, self._specs, pace))

    def _record(self, session: Session, job: Job) -> JobRecord:
        session.flush()
        run = session.get(Run, job.run_id) if job.run_id else None
        return job_record(job, run)

    def get_job(self, job_id: str) -> JobRecord:
        """Core rows and the spec cache, as ``jobs_since``: clients poll this (a job's state
        while it is cancelled) and the ORM parsed the spec on every read."""
        with self._sessions() as session:
            found = session.execute(feed.select_jobs(feed.JOBS.c.id == job_id)).all()
        if not found:
            raise NotFoundError(f"no such job: {job_id}")
        return feed.to_records(found, self._specs)[0]

    def jobs_since(self, serial: int, limit: int | None = 1000) -> list[JobRecord]:
        """The scheduler's sync path (``feed.py``): one query, and a job read back after each
        transition is not parsed again."""
        with self._sessions() as session:
            found = feed.rows_since(session, serial, limit)
        return feed.to_records(found, self._specs)

    def _read_records(self, session: Session, job_ids: Sequence[str]) -> list[JobRecord]:
        """The records of jobs just written in this transaction, in ``job_ids`` order (a job
        named twice appears twice, in its final version): one Core read after the bulk
        writes, the spec parsed through the cache."""
        rows = feed.rows_by_id(session, job_ids)
        records = {
            record.id: record for record in feed.to_records(list(rows.values()), self._specs)
        }
        return [records[job_id] for job_id in job_ids]

    def _records(self, session: Session, rows: Sequence[Job]) -> list[JobRecord]:
        run_ids = [row.run_id for row in rows if row.run_id is not None]
        runs: dict[str, Run] = {}
        for part in jobs.chunks(run_ids):
            runs.update(
                (run.id, run) for run in session.scalars(select(Run).where(Run.id.in_(part)))
            )
        return [job_record(row, runs.get(row.run_id) if row.run_id else None) for row in rows]

    def latest_serial(self) -> int:
        with self._sessions() as session:
            return jobs.latest_serial(session)

    def events(self, job_id: str) -> list[EventRecord]:
        with self._sessions() as session:
            self._require_job(session, job_id)
            rows = session.scalars(select(Event).where(Event.job_id == job_id).order_by(Event.id))
            return [event_record(row) for row in rows]

    def runs(self, job_id: str) -> list[RunRecord]:
        with self._sessions() as session:
            self._require_job(session, job_id)
            rows = session.scalars(select(Run).where(Run.job_id == job_id).order_by(Run.attempt))
            found = [run_record(row) for row in rows]
            uses = gpu_use_of(session, [run.id for run in found])
        return [replace(run, gpu=uses[run.id]) if run.id in uses else run for run in found]

    def record_gpu_use(self, uses: Mapping[str, GpuUse]) -> None:
        if uses:
            with self._write() as session:
                record_gpu_use(session, uses)

    def owner_uid(self, request: OwnerUidRequest) -> OwnerUid:
        """The uid ``request.owner``'s local jobs run as, assigned at its first run and kept
        for good (``store/owner_uids.py``)."""
        # Servers giving uids to new owners at once all reach for the lowest free uid: each
        # loss moves the loser on by one, so as many tries as there may be rivals.
        return self._upsert(
            lambda session: owner_uid(session, request, self._now()), tries=OWNER_UID_TRIES
        )

    def owner_uids(self) -> dict[str, int]:
        """Every owner's uid (``owner_uid``)."""
        with self._sessions() as session:
            return owner_uids(session)

    def record_run_resources(self, resources: Mapping[str, RunResources]) -> None:
        if resources:
            with self._write() as session:
                record_run_resources(session, resources)

    def run_report(self, query: RunReportQuery) -> list[RunReportRow]:
        with self._sessions() as session:
            return run_report(session, query)

    def _require_job(self, session: Session, job_id: str) -> None:
        if session.get(Job, job_id) is None:
            raise NotFoundError(f"no such job: {job_id}")

    def list_jobs(
        self,
        *,
        queue: str | None = None,
        states: Sequence[JobState] | None = None,
        owner: str | None = None,
        labels: Mapping[str, str] | None = None,
        after: int | None = None,
        limit: int = 100,
        name_contains: str | None = None,
        newest_first: bool = False,
        array_id: str | None = None,
    ) -> JobPage:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        order = Job.submit_serial.desc() if newest_first else Job.submit_serial
        clauses = lookup.job_filters(
            queue=queue,
            states=states,
            owner=owner,
            labels=labels,
            name_contains=name_contains,
            array_id=array_id,
        )
        query = select(Job).where(*clauses).order_by(order).limit(limit + 1)
        if after is not None:
            query = query.where(
                Job.submit_serial < after if newest_first else Job.submit_serial > after
            )
        with self._sessions() as session:
            rows = list(session.scalars(query))
            more = len(rows) > limit
            rows = rows[:limit]
            cursor = rows[-1].submit_serial if more else None
            return JobPage(jobs=self._records(session, rows), next_cursor=cursor)

    def count_jobs(
        self,
        *,
        queue: str | None = None,
        states: Sequence[JobState] | None = None,
        owner: str | None = None,
        labels: Mapping[str, str] | None = None,
        name_contains: str | None = None,
    ) -> int:
        clauses = lookup.job_filters(
            queue=queue, states=states, owner=owner, labels=labels, name_contains=name_contains
        )
        with self._sessions() as session:
            return lookup.count_jobs(session, clauses)

    def find_job(self, reference: str) -> JobRecord:
        with self._sessions() as session:
            job_id = lookup.resolve_job(session, reference)
        return self.get_job(job_id)

    def find_array(self, reference: str) -> str:
        with self._sessions() as session:
            return lookup.resolve_array(session, reference)

    # Queues and quotas --------------------------------------------------------------------
    def put_queue(self, spec: QueueSpec) -> None:
        self._upsert(lambda session: catalog.put_queue(session, spec, self._now()))

    def get_queue(self, name: str) -> QueueSpec:
        with self._sessions() as session:
            return catalog.get_queue(session, name)

    def list_queues(self) -> list[QueueSpec]:
        with self._sessions() as session:
            return catalog.list_queues(session)

    def delete_queue(self, name: str) -> None:
        with self._write() as session:
            catalog.delete_queue(session, name)

    def put_quota(self, spec: QuotaSpec, *, parent: str | None = None) -> None:
        self._upsert(lambda session: catalog.put_quota(session, spec, parent, self._now()))

    def get_quota(self, name: str) -> QuotaSpec:
        with self._sessions() as session:
            return catalog.get_quota(session, name)

    def list_quotas(self) -> list[QuotaSpec]:
        with self._sessions() as session:
            return catalog.list_quotas(session)

    def delete_quota(self, name: str) -> None:
        with self._write() as session:
            catalog.delete_quota(session, name)

    # Clusters and nodes -------------------------------------------------------------------
    def upsert_cluster(self, spec: ClusterSpec, *, state: str = "ready") -> ClusterRecord:
        def write(session: Session) -> ClusterRecord:
            row = catalog.upsert_cluster(session, spec, state, self._now())
            session.flush()
            return catalog.cluster_record(row)

        return self._upsert(write)

    def upsert_node(self, cluster: str, node: NodeGroup, *, state: str = "ready") -> NodeRecord:
        def write(session: Session) -> NodeRecord:
            row = catalog.upsert_node(session, cluster, node, state)
            session.flush()
            return catalog.node_record(row)

        return self._upsert(write)

    def heartbeat(self, cluster: str, nodes: Sequence[str] | None = None) -> ClusterRecord:
        with self._write() as session:
            return catalog.cluster_record(catalog.heartbeat(session, cluster, nodes, self._now()))

    def set_cluster_state(
        self, name: str, state: str, *, reason: str | None = None
    ) -> ClusterRecord:
        with self._write() as session:
            row = catalog.set_cluster_state(session, name, state, reason, self._now())
            return catalog.cluster_record(row)

    def get_cluster(self, name: str) -> ClusterRecord:
        with self._sessions() as session:
            return catalog.cluster_record(catalog.get_cluster(session, name))

    def list_clusters(self) -> list[ClusterRecord]:
        with self._sessions() as session:
            rows = session.scalars(select(Cluster).order_by(Cluster.name))
            return [catalog.cluster_record(row) for row in rows]

    def list_nodes(self, cluster: str) -> list[NodeRecord]:
        with self._sessions() as session:
            catalog.get_cluster(session, cluster)
            rows = session.scalars(select(Node).where(Node.cluster == cluster).order_by(Node.name))
            return [catalog.node_record(row) for row in rows]

    def delete_cluster(self, name: str) -> None:
        with self._write() as session:
            session.delete(catalog.get_cluster(session, name))

    # The fleet in force --------------------------------------------------------------------
    def get_fleet(self) -> FleetRecord | None:
        with self._sessions() as session:
            return fleet.get_fleet(session)

    def fleet_version(self) -> int:
        with self._sessions() as session:
            return fleet.fleet_version(session)

    def cluster_allocations(self) -> dict[str, dict[str, float]]:
        with self._sessions() as session:
            return fleet.cluster_allocations(session)

    def usage(self, query: UsageQuery) -> UsageReport:
        with self._sessions() as session:
            return compute_usage(session, query, self._now())

    def decayed_usage(self, half_life: float) -> tuple[datetime, dict[str, dict[str, float]]]:
        now = self._now()
        with self._sessions() as session:
            return now, decayed_usage(session, now, half_life)

    def apply_fleet(self, change: FleetChange) -> FleetRecord:
        return self._upsert(lambda session: fleet.apply_fleet(session, change, self._now()))

    # Leader lease -------------------------------------------------------------------------
    def try_acquire_lease(self, name: str, holder: str, ttl: float) -> Lease | None:
        try:
            with self._write() as session:
                return leases.acquire(session, name, holder, ttl, self._lease_now(session))
        except OperationalError as error:
            if not leases.lock_not_available(error):
                raise
            # Its holder is inside a write with it (or stopped there, until the server ends
            # that transaction): not acquired this time.
            log.info("lease %s: its row is locked by a writer; not acquired this time", name)
            return None

    def renew_lease(self, lease: Lease, ttl: float) -> Lease | None:
        with self._write() as session:
            return leases.renew(session, lease, ttl, self._lease_now(session))

    def resume_lease(self, lease: Lease, ttl: float) -> Lease | None:
        with self._write() as session:
            return leases.resume(session, lease, ttl, self._lease_now(session))

    def release_lease(self, lease: Lease) -> None:
        with self._write() as session:
            leases.release(session, lease, self._lease_now(session))

    def current_lease(self, name: str) -> Lease | None:
        with self._sessions() as session:
            return leases.current(session, name, self._lease_now(session))
