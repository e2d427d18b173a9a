"""Building the engine's ``SchedulingSnapshot`` from the JobDb and the store, incrementally.

The queued backlog can be tens of thousands of jobs while only a few change between runs, so
the builder keeps the engine jobs of the queued backlog across cycles and applies only the
JobDb's change feed (the records each sync applied): a snapshot costs what changed since the
last one, not the size of the backlog. Engine jobs are converted ahead of time in small
slices (``prepare``), between the loop's transitions passes, so no single step of the loop
holds up a cancel. The node tables (clusters plus the allocations of active runs) are small
and rebuilt every time. An engine job depends on the resource layout; when that changes,
every queued job is converted again.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import Assignment
from flotilla.framework.jobs import SchedulingJob, ShapeInterner
from flotilla.framework.quota import QuotaTree
from flotilla.framework.resources import ResourceSpace
from flotilla.framework.snapshot import QueueInfo, RunningJob, SchedulingSnapshot
from flotilla.jobdb import JobDb, ReadTxn
from flotilla.model import ClusterSpec
from flotilla.service.admission import Admission
from flotilla.service.containment import JobFaults
from flotilla.service.dependencies import DependencyGate
from flotilla.service.records import (
    cluster_from_record,
    job_from_record,
    space_for,
    unknown_resources,
)
from flotilla.service.victims import PreemptorHolds
from flotilla.store import (
    ACTIVE_JOB_STATES,
    ClusterRecord,
    JobRecord,
    JobState,
    NotFoundError,
    Store,
)


@dataclass
class LoopSnapshot:
    snapshot: SchedulingSnapshot
    clusters: dict[str, Cluster]
    reasons: dict[str, str]
    """Queued jobs left out of the snapshot, and why (no cluster offers what they ask for)."""


class StaleJobs:
    """Ids to convert, taken first in first out: in change-feed order, which is submission
    order, so the elements of a throttled array are admitted in index order (a set's hash
    order admitted 1 and 5 before 0, where docs/jobs.md promises index order)."""

    def __init__(self, ids: Iterable[str] = ()) -> None:
        self._order: deque[str] = deque()
        self._members: set[str] = set()
        self.update(ids)

    def add(self, job_id: str) -> None:
        if job_id not in self._members:
            self._members.add(job_id)
            self._order.append(job_id)

    def update(self, ids: Iterable[str]) -> None:
        for job_id in ids:
            self.add(job_id)

    def pop(self) -> str:
        job_id = self._order.popleft()
        self._members.discard(job_id)
        return job_id

    def __len__(self) -> int:
        return len(self._members)


def in_submission_order(records: Iterable[JobRecord]) -> list[str]:
    return [record.id for record in sorted(records, key=lambda record: record.submit_serial)]


class SnapshotBuilder:
    def __init__(
        self,
        store: Store,
        jobdb: JobDb,
        pace: Callable[[], None] = lambda: None,
        faults: JobFaults | None = None,
        holds: PreemptorHolds | None = None,
    ) -> None:
        """``pace`` is called between the jobs a build walks (``Precedence.pace``); a job
        whose conversion fails is failed through ``faults`` (``containment.py``); a
        preemptor waiting for its victims is held back through ``holds`` (``victims.py``)."""
        self._store = store
        self._holds = PreemptorHolds() if holds is None else holds
        self._jobdb = jobdb
        self._pace = pace
        self.faults = JobFaults() if faults is None else faults
        self.dependencies = DependencyGate(self._stored_job)
        """Queued jobs held back until their dependencies end (not in ``_queued``)."""
        self.dependencies.faults = self.faults
        self.cluster_order: Callable[[], Sequence[str]] | None = None
        """The clusters' declaration order (the fleet file's), which strategies use to break
        ties; None: by name."""
        self._queued: dict[str, JobRecord] = {}
        """Queued records by id, kept from the change feed."""
        self._serial = -1
        """The JobDb serial the queued records are up to date with."""
        self._stale = StaleJobs()
        """Ids whose engine job must be (re)built or dropped."""
        self._engine: dict[str, SchedulingJob] = {}
        """Engine jobs of the queued records that some cluster could run."""
        self._shapes = ShapeInterner()
        """Shares equal placement keys between the engine jobs (``framework.jobs``)."""
        self._unplaceable: dict[str, str] = {}
        self._space: ResourceSpace | None = None
        self._active: dict[str, tuple[str, tuple[str, ...], SchedulingJob]] = {}
        self.gangs: dict[str, JobRecord] = {}
        """Queued gang jobs (their timeout is checked every cycle without a backlog scan)."""
        self._admission = Admission()
        """Queued jobs held back: retry backoff, array parallelism."""
        self._reload(jobdb.read_txn())

    def _stored_job(self, job_id: str) -> JobRecord | None:
        """A job from the store (one the JobDb dropped after it finished)."""
        try:
            return self._store.get_job(job_id)
        except NotFoundError:
            return None

    # --- the change feed ------------------------------------------------------------------

    def observe(self, records: Iterable[JobRecord], synced_serial: int) -> None:
        """Apply the records a JobDb sync returned (oldest first); ``synced_serial`` is the
        JobDb's serial after that sync."""
        read = self._jobdb.read_txn()
        records = list(records)
        for record in records:
            with self.faults.contain("its admission", record.id):
                self._admission.observe(record)
            held = self._queued.get(record.id)
            if held is not None and held.serial > record.serial:
                continue
            if record.state is JobState.QUEUED and self.dependencies.admit(record, read):
                self._queue(record)
            elif held is not None:
                del self._queued[record.id]
                self.gangs.pop(record.id, None)
            else:
                if record.state is not JobState.QUEUED:
                    self.dependencies.forget(record.id)
                continue
            self._stale.add(record.id)
        for record in self.dependencies.changed((record.id for record in records), read):
            self._queue(record)
            self._stale.add(record.id)
        self._serial = max(self._serial, synced_serial)

    def _queue(self, record: JobRecord) -> None:
        self._queued[record.id] = record
        if record.spec.gang is not None:
            self.gangs[record.id] = record

    def _reload(self, read: ReadTxn) -> None:
        """Start over from the JobDb (first use, or a sync that bypassed ``observe``)."""
        self.dependencies.clear()
        self._queued = {
            job.id: job
            for job in read.jobs_in_state(JobState.QUEUED)
            if self.dependencies.admit(job, read)
        }
        self.gangs = {key: job for key, job in self._queued.items() if job.spec.gang}
        self._engine.clear()
        self._unplaceable.clear()
        self._stale = StaleJobs(in_submission_order(self._queued.values()))
        self._serial = read.serial
        self._admission.reset(
            job for state in ACTIVE_JOB_STATES for job in read.jobs_in_state(state)
        )

    # --- converting ahead of time ---------------------------------------------------------

    def prepare(self, budget_seconds: float) -> None:
        """Convert changed queued jobs for the last resource layout, for at most about
        ``budget_seconds``: called between transitions passes so that the snapshot built
        when a run is triggered finds them ready."""
        if self._space is None or not self._stale:
            return
        deadline = time.perf_counter() + budget_seconds
        while self._stale and time.perf_counter() < deadline:
            for _ in range(min(200, len(self._stale))):
                self._convert_contained(self._stale.pop(), self._space)

    def _convert_contained(self, job_id: str, space: ResourceSpace) -> None:
        """Convert one job; one that cannot be converted fails, the others go on."""
        with self.faults.contain("its conversion to an engine job", job_id):
            self._convert(job_id, space)

    def _convert(self, job_id: str, space: ResourceSpace) -> None:
        self._engine.pop(job_id, None)
        self._unplaceable.pop(job_id, None)
        self._admission.withdraw(job_id)
        record = self._queued.get(job_id)
        if record is None:
            return
        waits = self._holds.held(job_id)
        if waits is not None:
            self._unplaceable[job_id] = waits
            return
        held = self._admission.admit(record, time.time())
        if held is not None:
            self._unplaceable[job_id] = held
            return
        missing = unknown_resources(record.spec, space)
        if missing:
            self._unplaceable[job_id] = f"no node of any cluster offers {', '.join(missing)}"
        else:
            self._engine[job_id] = job_from_record(record, space, self._shapes)

    def _use_space(self, space: ResourceSpace) -> None:
        if self._space is not None and self._space.names == space.names:
            return
        self._space = space
        self._engine.clear()
        self._unplaceable.clear()
        self._stale = StaleJobs(in_submission_order(self._queued.values()))

    # --- building -------------------------------------------------------------------------

    def _ordered(self, records: list[ClusterRecord]) -> list[ClusterRecord]:
        """Clusters with nodes (one whose backend never answered has none yet), in the
        declaration order."""
        records = [record for record in records if record.spec.get("nodes")]
        if self.cluster_order is None:
            return records
        position = {name: index for index, name in enumerate(self.cluster_order())}
        return sorted(records, key=lambda record: (position.get(record.name, len(position)),))

    def build(self, read: ReadTxn, *, include_queued: bool = True) -> LoopSnapshot:
        """The snapshot of ``read`` (node tables with every active run's allocation), and —
        unless only node state is needed (reconciling) — the queued jobs."""
        if read.serial > self._serial:
            self._reload(read)
        records = self._ordered(self._store.list_clusters())
        active_records = [job for state in ACTIVE_JOB_STATES for job in read.jobs_in_state(state)]
        # Preempted runs not yet seen to stop still hold their nodes: no candidate for a
        # victim any more, but no room for another job either (``victims.py``).
        stopping = read.jobs_in_state(JobState.PREEMPTED)
        cluster_specs = [ClusterSpec.model_validate(record.spec) for record in records]
        space = space_for(cluster_specs, [job.spec for job in (*active_records, *stopping)])
        self._use_space(space)
        clusters = {
            record.name: cluster_from_record(record, order, space)
            for order, record in enumerate(records)
        }
        running: list[RunningJob] = []
        pace = self._pace
        now = time.time()
        active = len(active_records)
        for index, job in enumerate((*active_records, *stopping)):
            pace()
            if job.run is None or job.run.cluster not in clusters:
                continue
            cluster = clusters[job.run.cluster]
            assignment = None
            with self.faults.contain("reading its placement", job.id, job.run.id):
                engine_job = self._active_job(job, space)
                assignment = Assignment.from_json(job.run.assignment, engine_job, cluster)
            if assignment is None:
                continue
            for placement in assignment.placements:
                cluster.nodes.allocate(placement.row, placement.request, placement.gpus)
            if index >= active:
                continue
            checkpoint = job.run.last_checkpoint_at
            started = job.run.started_at
            running.append(
                RunningJob(
                    engine_job,
                    assignment,
                    # From the run's start: a run not started yet has lost no work and its
                    # protection (``min_runtime``) has not begun.
                    now if started is None else started.timestamp(),
                    None if checkpoint is None else checkpoint.timestamp(),
                )
            )
        if len(self._active) > 2 * len(active_records) + 1000:
            live = {job.id for job in active_records}
            self._active = {key: value for key, value in self._active.items() if key in live}
        queued: list[SchedulingJob] = []
        reasons: dict[str, str] = {}
        if include_queued:
            self._stale.update(self._admission.released(time.time()))
            self._stale.update(self._holds.take_changed())
            while self._stale:
                pace()
                self._convert_contained(self._stale.pop(), space)
            self._shapes.trim(len(self._engine))
            queued = list(self._engine.values())
            reasons = dict(self._unplaceable)
            reasons.update(self.dependencies.reasons)
        queues = [
            QueueInfo(
                name=spec.name,
                weight=spec.weight,
                order=order,
                quota=spec.quota,
                preemption=spec.preemption,
                owners=spec.owners,
            )
            for order, spec in enumerate(self._store.list_queues())
        ]
        quota_specs = self._store.list_quotas()
        snapshot = SchedulingSnapshot(
            time=time.time(),
            clusters=list(clusters.values()),
            queues=queues,
            queued=queued,
            running=running,
            quotas=QuotaTree(quota_specs, space) if quota_specs else None,
        )
        return LoopSnapshot(snapshot, clusters, reasons)

    def _active_job(self, record: JobRecord, space: ResourceSpace) -> SchedulingJob:
        """The engine's job for an active record, built once per (run, resource layout) — a
        run's job does not change while it moves from leased to running, and a batch of
        starts would otherwise rebuild every one of them — or taken from its queued self."""
        run = record.run.id if record.run is not None else ""
        cached = self._active.get(record.id)
        if cached is not None and cached[0] == run and cached[1] == space.names:
            return cached[2]
        # A job just leased was converted while it was queued (``build`` has already made
        # ``_engine`` follow this layout).
        job = self._engine.get(record.id) or job_from_record(record, space)
        self._active[record.id] = (run, space.names, job)
        return job


class CurrentState:
    """Reconciliation's view of now: the JobDb and freshly built node tables."""

    def __init__(self, jobdb: JobDb, state: LoopSnapshot) -> None:
        self._read = jobdb.read_txn()
        self._clusters = state.clusters

    def waiting(self, job: str) -> bool:
        record = self._read.get(job)
        return record is not None and record.state is JobState.QUEUED

    def running(self, job: str) -> bool:
        record = self._read.get(job)
        return record is not None and record.state in ACTIVE_JOB_STATES

    def cluster_ready(self, cluster: str) -> bool:
        found = self._clusters.get(cluster)
        return found is not None and found.ready

    def room_for(self, assignment: Assignment) -> str | None:
        cluster = self._clusters.get(assignment.cluster)
        if cluster is None:
            return f"cluster {assignment.cluster} is gone"
        nodes = cluster.nodes
        for placement in assignment.placements:
            free = nodes.capacity[placement.row] - nodes.allocated[placement.row]
            if (free < placement.request - 1e-9).any():
                return f"node {placement.node} no longer has room"
        return None
