"""The ``Store`` protocol: the one contract every durable store of Flotilla keeps.

Contract and failure semantics, for every method:

- **Atomic.** Each call is one database transaction. It either commits whole or raises and
  writes nothing; a process killed at any point leaves the database as of the last commit.
  Batch methods (``submit_jobs``, ``record_runs``, ``transition_many``) are one transaction for
  the whole batch: one invalid item and nothing of the batch is stored.
- **Validated.** Job state changes follow ``flotilla.store.states.JOB_TRANSITIONS``; an illegal
  one raises ``IllegalTransitionError``. Unknown ids raise ``NotFoundError``. Errors are
  subclasses of ``StoreError`` and leave the store unchanged.
- **Histories.** Every job state change, submission and cancel request appends an event in the
  same transaction; a job's events replay its states exactly.
- **Serials.** Every write to a job or its runs gives the job a fresh serial from one counter,
  strictly increasing in commit order (also with concurrent writers on PostgreSQL). So
  ``jobs_since(s)`` returns every job changed after a reader saw serial ``s``, and nothing
  committed later can appear with a smaller serial: incremental sync never misses a change.
- **One run at a time.** A run is created only for a queued job (``record_run``), so a job has
  at most one active run, and a report about an old run raises ``StaleRunError``.
- **Fencing.** Writes that carry ``fence`` (a held ``Lease``) commit only if that lease is
  still held, unexpired and not handed over (same token), checked inside the transaction;
  otherwise they raise ``LeaseLostError`` and write nothing. A deposed leader cannot write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from flotilla.model import ClusterSpec, JobSpec, NodeGroup, QueueSpec, QuotaSpec
from flotilla.model.gpu_use import GpuUse
from flotilla.model.owner_uids import OwnerUid, OwnerUidRequest
from flotilla.model.run_resources import RunResources
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
from flotilla.store.states import JobState, RunState

if TYPE_CHECKING:
    from flotilla.store.observe import CommitObserver
    from flotilla.store.run_report import RunReportQuery, RunReportRow
    from flotilla.store.usage import UsageQuery, UsageReport


@dataclass(frozen=True, slots=True)
class RunRequest:
    """Lease a queued job to a cluster: creates its next run."""

    job_id: str
    cluster: str
    assignment: Mapping[str, Any] = field(default_factory=dict)
    reason: str = "scheduled"


@dataclass(frozen=True, slots=True)
class CheckpointReport:
    """Run ``run_id`` of job ``job_id`` reported a checkpoint at ``at`` (its backend read
    the time of the job's ``FLOTILLA_CHECKPOINT_FILE``)."""

    job_id: str
    run_id: str
    at: datetime


@dataclass(frozen=True, slots=True)
class Transition:
    """Move a job to ``new_state``. ``run``, when given, must be the job's latest run: a
    report about an older attempt is rejected (``StaleRunError``). ``exit_code`` and
    ``message`` are recorded on the run that ends."""

    job_id: str
    new_state: JobState
    reason: str
    run: str | None = None
    exit_code: int | None = None
    message: str | None = None
    run_state: RunState | None = None
    """What the ending run becomes when it is not what ``new_state`` implies: a failed attempt
    that is retried re-queues its job while its run stays ``failed``."""
    not_before: datetime | None = None
    """With ``new_state`` queued: the job is not scheduled before this time (retry backoff);
    every transition sets it (``None`` clears it)."""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    """When the engine says the run started and ended (``None``: when this is recorded). A run
    that ended while no scheduler watched ends at its engine's time, not at the restart's, so
    ``usage`` does not count the outage; kept within the run's start and the store's now."""


@dataclass(frozen=True, slots=True)
class CycleWrite:
    """A scheduling cycle's job writes, for one transaction: ``transitions`` applied in order,
    then ``runs`` leased."""

    transitions: Sequence[Transition] = ()
    runs: Sequence[RunRequest] = ()

    def __bool__(self) -> bool:
        return bool(self.transitions or self.runs)


@dataclass(frozen=True, slots=True)
class CycleCommit:
    """What ``commit_cycle`` wrote and read."""

    runs: list[RunRecord]
    """The runs created, in the order of the write's ``runs``."""
    changes: list[JobRecord]
    """Every job whose serial is above the ``since`` given, by serial: the change feed up to
    and including this write."""


class Store(Protocol):
    # Jobs ---------------------------------------------------------------------------------
    def submit_jobs(
        self,
        batch: Sequence[JobSpec],
        *,
        owner: str | None = None,
        pace: Callable[[], None] | None = None,
    ) -> list[str]:
        """Store a batch of jobs (a spec with ``count`` N stands for N jobs name-0…name-N-1,
        one with ``array.size`` N for N elements of one new array, ``array_id`` and
        ``array_index`` set) as queued, all or nothing; returns their ids in order. Raises
        ``InvalidJobError`` if a queue does not exist, ``DuplicateJobError`` if a name is
        repeated in the batch (a stored job's name may be used again: the newest is meant).
        ``owner`` defaults to each spec's ``user``.
        ``pace`` is called between jobs while their rows are made, before any lock is taken
        (the API's ``Precedence.pace``: reads go before a large batch)."""
        ...

    def cancel(self, job_id: str, reason: str) -> JobRecord:
        """Cancel a job: a queued or preempted job is cancelled now; an active one (leased,
        pending, running) gets ``cancel_requested`` for the scheduler to stop its run and then
        move it to cancelled. Idempotent: a finished job is returned unchanged."""
        ...

    def cancel_many(self, job_ids: Sequence[str], reason: str) -> list[JobRecord]:
        """``cancel`` for several jobs in one transaction: an unknown id cancels none."""
        ...

    def hold_many(self, job_ids: Sequence[str], reason: str) -> list[JobRecord]:
        """Hold queued jobs (the scheduler passes them by), all or none: ``ConflictError``
        for a job that is neither queued nor held. A held job is returned unchanged."""
        ...

    def release_many(self, job_ids: Sequence[str], reason: str) -> list[JobRecord]:
        """Release held jobs back to queued, all or none: ``ConflictError`` for a job that is
        neither held nor queued. A queued job is returned unchanged."""
        ...

    def requeue_many(self, job_ids: Sequence[str], reason: str) -> list[JobRecord]:
        """Requeue jobs (Slurm's ``scontrol requeue``), all or none: one holding a run becomes
        preempted with ``reason`` (the loop stops the run, then queues the job for a new one);
        one waiting already is returned unchanged; ``ConflictError`` for a job that ended."""
        ...

    def set_priority(self, job_id: str, priority: int, reason: str = "") -> JobRecord:
        """Change a waiting (queued or preempted) job's priority, with a ``reprioritized``
        event and a fresh serial. Raises ``ConflictError`` for a job in any other state."""
        ...

    def queue_position(self, job_id: str) -> int | None:
        """A queued job's 1-based place in its queue's order (higher priority first, then
        submission); None when the job is not queued."""
        ...

    def job_counts(self) -> dict[str, dict[str, int]]:
        """Number of jobs per queue and state: ``{queue: {state: n}}`` (zeros left out)."""
        ...

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
        """One state change (see ``Transition``); the active run follows the job's state."""
        ...

    def transition_many(
        self,
        changes: Sequence[Transition],
        *,
        fence: Lease | None = None,
        records: bool = True,
    ) -> list[JobRecord]:
        """Several state changes in one transaction, applied in order. ``records=False``
        returns ``[]`` instead of reading the jobs back: the scheduler learns the result from
        its next sync, and the read-back is a large part of the call (``docs/performance.md``)."""
        ...

    def record_run(
        self,
        job_id: str,
        cluster: str,
        assignment: Mapping[str, Any],
        *,
        reason: str = "scheduled",
        fence: Lease | None = None,
    ) -> RunRecord:
        """Lease a queued job: create its next run (state leased) and move the job to leased.
        ``assignment`` holds node and device ids per task replica."""
        ...

    def record_runs(
        self, requests: Sequence[RunRequest], *, fence: Lease | None = None
    ) -> list[RunRecord]:
        """A scheduling cycle's leases, all in one transaction."""
        ...

    def grow_run(
        self,
        job_id: str,
        run_id: str,
        assignment: Mapping[str, Any],
        reason: str,
        *,
        fence: Lease | None = None,
    ) -> JobRecord:
        """A non-strict gang's active run ``run_id`` grew: store its whole new ``assignment``
        (old placements and new), give the job a new serial and an ``expanded`` event with
        ``reason``. Raises ``StaleRunError`` when the run is no longer the job's active run."""
        ...

    def record_checkpoints(
        self, reports: Sequence[CheckpointReport], *, fence: Lease | None = None
    ) -> None:
        """Keep each report's time as its run's ``last_checkpoint_at`` and give the job a new
        serial (every JobDb sees it; no event: a job may checkpoint every minute). A report
        about a run that is no longer its job's active run is ignored."""
        ...

    def commit_cycle(
        self,
        write: CycleWrite,
        *,
        since: int,
        fence: Lease | None = None,
        pace: Callable[[], None] | None = None,
    ) -> CycleCommit:
        """Apply ``write`` in one transaction (its transitions in order, then its leases) and
        read the change feed after ``since`` in that same transaction: the writer's
        incremental sync, with no round trip of its own and no window between the write and
        the read. All or nothing, as ``transition_many`` and ``record_runs``: an illegal
        transition, a stale run or a lease of a job no longer queued raises and writes
        nothing. An empty write is a read of the change feed alone. ``pace`` is called
        between the feed's jobs while they are made records, after the transaction (the
        loop's ``Precedence.pace``)."""
        ...

    def get_job(self, job_id: str) -> JobRecord: ...

    def jobs_since(self, serial: int, limit: int | None = 1000) -> list[JobRecord]:
        """Jobs whose serial is greater than ``serial``, by serial, at most ``limit`` (None:
        all): call again with the last one's serial until the answer is empty."""
        ...

    def latest_serial(self) -> int:
        """The highest serial handed out so far (0 for an empty store)."""
        ...

    def events(self, job_id: str) -> list[EventRecord]:
        """The job's history, oldest first."""
        ...

    def runs(self, job_id: str) -> list[RunRecord]:
        """The job's runs, first attempt first."""
        ...

    def record_gpu_use(self, uses: Mapping[str, GpuUse]) -> None:
        """Replace each run's recorded GPU use (run id → its figures so far)."""
        ...

    def owner_uid(self, request: OwnerUidRequest) -> OwnerUid:
        """The uid ``request.owner``'s local jobs run as (a root server's uid range),
        assigned at its first run and kept for good: never another owner's
        (``flotilla.store.owner_uids``)."""
        ...

    def record_run_resources(self, resources: Mapping[str, RunResources]) -> None:
        """Keep each ended run's measured CPU time and peak memory (run id → its figures;
        ``flotilla.store.run_report``). Figures only, no state: not fenced."""
        ...

    def run_report(self, query: RunReportQuery) -> list[RunReportRow]:
        """The runs ``query`` selects with what they used, oldest first (``flotilla sacct``).
        Read-only."""
        ...

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
        """Jobs in submission order (``newest_first``: the reverse), filtered (``labels``:
        every pair must match; ``name_contains``: a case-insensitive substring of the name;
        ``array_id``: the elements of one array);
        keyset-paginated: pass the page's ``next_cursor`` as ``after`` (with the same
        order: newest first, ``after`` means older than). Stable under concurrent
        submissions."""
        ...

    def count_jobs(
        self,
        *,
        queue: str | None = None,
        states: Sequence[JobState] | None = None,
        owner: str | None = None,
        labels: Mapping[str, str] | None = None,
        name_contains: str | None = None,
    ) -> int:
        """How many jobs ``list_jobs`` with the same filters would list over all pages."""
        ...

    def find_job(self, reference: str) -> JobRecord:
        """The job a user's reference names: a full id, ``QUEUE/NAME`` (the latest job of
        that name there), a ``NAME`` one queue uses, or an id prefix (``store.lookup``).
        Raises ``NotFoundError`` when none matches, ``AmbiguousJobError`` (listing the
        candidates) when several do."""
        ...

    def find_array(self, reference: str) -> str:
        """The array id a user's reference names: the id or an unambiguous prefix of one
        (tables show 8 characters). Raises as ``find_job``."""
        ...

    # Queues and quotas --------------------------------------------------------------------
    def put_queue(self, spec: QueueSpec) -> None:
        """Create or replace a queue."""
        ...

    def get_queue(self, name: str) -> QueueSpec: ...

    def list_queues(self) -> list[QueueSpec]: ...

    def delete_queue(self, name: str) -> None:
        """Raises ``ConflictError`` if the queue has jobs (their history would dangle)."""
        ...

    def put_quota(self, spec: QuotaSpec, *, parent: str | None = None) -> None:
        """Create or replace a quota and its whole subtree (children not in ``spec`` go)."""
        ...

    def get_quota(self, name: str) -> QuotaSpec:
        """The quota with its subtree."""
        ...

    def list_quotas(self) -> list[QuotaSpec]:
        """The roots of the quota forest, each with its subtree."""
        ...

    def delete_quota(self, name: str) -> None:
        """Delete a quota and its subtree."""
        ...

    # Clusters and nodes -------------------------------------------------------------------
    def upsert_cluster(self, spec: ClusterSpec, *, state: str = "ready") -> ClusterRecord:
        """Create or replace a cluster and its nodes (node groups expanded); nodes no longer
        in the spec are removed, the others keep their state and heartbeat."""
        ...

    def upsert_node(self, cluster: str, node: NodeGroup, *, state: str = "ready") -> NodeRecord:
        """Create or replace one node (a group without ``count``)."""
        ...

    def heartbeat(self, cluster: str, nodes: Sequence[str] | None = None) -> ClusterRecord:
        """Record that the cluster (and ``nodes``, or all its nodes) reported just now."""
        ...

    def set_cluster_state(
        self, name: str, state: str, *, reason: str | None = None
    ) -> ClusterRecord:
        """Set the cluster's state and why (``reason``, kept in the database so every process
        over it shows it; cleared when None, and by ``upsert_cluster``). Never give a
        secret's value in ``reason``."""
        ...

    def get_cluster(self, name: str) -> ClusterRecord: ...

    def list_clusters(self) -> list[ClusterRecord]: ...

    def list_nodes(self, cluster: str) -> list[NodeRecord]: ...

    def delete_cluster(self, name: str) -> None: ...

    # Leader lease -------------------------------------------------------------------------
    def get_fleet(self) -> FleetRecord | None:
        """The fleet in force (the applied fleet file, secret references only); None if no
        fleet was ever applied (``flotilla up`` without ``--fleet``)."""
        ...

    def fleet_version(self) -> int:
        """The version of the fleet in force, 0 if none: cheap enough to read every cycle."""
        ...

    def cluster_allocations(self) -> dict[str, dict[str, float]]:
        """Per cluster, the resources its active runs hold (their placed replicas' requests,
        in base units): what ``flotilla clusters`` shows against capacity."""
        ...

    def usage(self, query: UsageQuery) -> UsageReport:
        """CPU-, memory- and GPU-hours the runs held within ``[query.since, query.until)``,
        grouped by queue, owner or job (``flotilla.store.usage``); a run still running counts
        up to now. Read-only."""
        ...

    def decayed_usage(self, half_life: float) -> tuple[datetime, dict[str, dict[str, float]]]:
        """Now, and each queue's usage decayed to now with ``half_life`` (resource name →
        resource-seconds) from run history (``flotilla.store.usage.decayed_usage``): the fair-
        share ledger's start after a restart. Read-only."""
        ...

    def apply_fleet(self, change: FleetChange) -> FleetRecord:
        """Apply a fleet in one transaction, all or nothing: raises ``ConflictError`` naming
        every problem (a removed queue that has jobs, a removed cluster with active jobs, a
        version other than ``change.expected_version``) and writes nothing then."""
        ...

    def try_acquire_lease(self, name: str, holder: str, ttl: float) -> Lease | None:
        """Take the lease for ``ttl`` seconds if it is free or expired, or held under the same
        ``holder`` name (a replica restarted with its old name takes it back at once); None if
        another holder has it. Every acquire starts a new term with a higher token, so a lease
        an earlier process got under the same name is fenced off (renew it with
        ``renew_lease``, which keeps the token). Exactly one holder at a time across
        processes (PostgreSQL)."""
        ...

    def renew_lease(self, lease: Lease, ttl: float) -> Lease | None:
        """Extend a held lease; None if it was lost (expired or taken): stop leading now."""
        ...

    def resume_lease(self, lease: Lease, ttl: float) -> Lease | None:
        """Extend ``lease`` also after it expired, unless another term began since (someone
        acquired it: the token grew); None then. A term is over only once another replica
        actually holds a newer one, not when its holder was merely slow to renew."""
        ...

    def release_lease(self, lease: Lease) -> None:
        """Give the lease up so another replica can take it without waiting for expiry."""
        ...

    def current_lease(self, name: str) -> Lease | None:
        """Who holds the lease now; None if nobody does (never taken, released or expired)."""
        ...

    def add_observer(self, observer: CommitObserver) -> None:
        """After every committed write that submitted jobs or changed their states, call
        ``observer.committed`` with what it did (``flotilla.store.observe``); never for a
        write that failed."""
        ...

    def close(self) -> None:
        """Release database connections."""
        ...
