"""The service's scheduling loop: every cycle sync, apply transitions, and — when leader —
schedule, commit and dispatch.

One cycle:

1. **Sync.** The JobDb catches up with the store by serial (``jobs_since``).
2. **Lead.** Take or renew the scheduling lease. Only the holder writes: every write it makes
   is fenced by the lease, so a replica that lost it cannot commit anything, and it stops
   scheduling at once (an async run in flight is reset).
3. **Transitions** (leader). Heartbeats and run states from each cluster's backend become job
   transitions (running, succeeded, failed, lost → re-queued); clusters that stopped
   reporting become unreachable and their runs are re-queued; cancel requests stop runs;
   gangs past their timeout fail; leased runs not yet dispatched (a crash in between) are
   dispatched again — dispatch is idempotent by run id.
4. **Schedule** (leader). ``mode: sync`` runs the algorithm inline on a snapshot. ``mode:
   async`` takes the result of the run triggered earlier, reconciles it against the current
   state, commits it, and only then triggers the next run (Armada).
5. **Commit and dispatch.** Evictions stop their runs (the job is re-queued when the backend
   confirms the stop); leases are recorded in one transaction; each new run is dispatched.

Jobs are identified in the engine by their store id.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from flotilla.backends.interface import (
    Backend,
    BackendError,
    BackendUnavailable,
    CancelOutcome,
    CancelRequest,
    DispatchRejected,
    DispatchRequest,
    LogChunk,
    LogsRequest,
    ReplicaPlacement,
    RunStatus,
    StatusRequest,
    UnknownRun,
)
from flotilla.backends.interface import RunState as BackendRunState
from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import Assignment
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.quota import QuotaTree
from flotilla.framework.resources import ResourceSpace
from flotilla.framework.snapshot import (
    CycleResult,
    QueueInfo,
    RunningJob,
    SchedulingConfig,
    SchedulingSnapshot,
)
from flotilla.jobdb import JobDb
from flotilla.model import ClusterSpec
from flotilla.model.scenario import Mode
from flotilla.scheduler.algorithm import SchedulingAlgorithm
from flotilla.scheduler.handle import CycleReport
from flotilla.scheduler.metrics import SchedulerMetrics
from flotilla.scheduler.reconcile import reconcile
from flotilla.scheduler.records import (
    assignment_from_json,
    assignment_to_json,
    cluster_from_record,
    job_from_record,
    space_for,
    unknown_resources,
)
from flotilla.scheduler.runner import AsyncSchedulingRunner, RunnerState, ThreadExecutor
from flotilla.store import (
    ACTIVE_JOB_STATES,
    IllegalTransitionError,
    JobRecord,
    JobState,
    Lease,
    LeaseLostError,
    RunRequest,
    StaleRunError,
    Store,
    StoreError,
    Transition,
)

log = logging.getLogger(__name__)

TRANSITION_SECONDS = 0.05
"""How often the loop applies transitions between full cycles (and so the floor of how fast a
cancel takes effect)."""

ALLOCATION_PUBLISH_SECONDS = 2.0
"""Allocation and share gauges read the catalog from the store: refreshed at most this often,
so a busy loop spends its cycles on transitions (cancel latency), not on metrics."""


def default_replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class LoopSettings:
    mode: Mode = Mode.SYNC
    cycle_interval: float = 1.0
    replica: str = field(default_factory=default_replica_id)
    lease_name: str = "scheduler"
    lease_ttl: float = 10.0
    heartbeat_timeout: float = 30.0
    """A cluster whose backend has not answered for this long becomes unreachable."""
    scheduling: SchedulingConfig = field(
        default_factory=lambda: SchedulingConfig(assignment_strategy="resource-aware")
    )


@dataclass
class _Snapshot:
    snapshot: SchedulingSnapshot
    clusters: dict[str, Cluster]
    reasons: dict[str, str]


class SchedulingLoop:
    """Drives the engine against the store and the backends. Implements ``SchedulerHandle``."""

    def __init__(
        self,
        store: Store,
        backends: Mapping[str, Backend],
        settings: LoopSettings | None = None,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self.store = store
        self.backends = dict(backends)
        self.settings = settings or LoopSettings()
        self.metrics = metrics or SchedulerMetrics()
        self.jobdb = JobDb.load(store)
        self.algorithm = SchedulingAlgorithm(self.settings.scheduling)
        self.runner: AsyncSchedulingRunner | None = None
        if self.settings.mode is Mode.ASYNC:
            self.runner = AsyncSchedulingRunner(
                lambda snapshot, cancel: self.algorithm.schedule(snapshot, cancel),
                ThreadExecutor(),
                on_duration=self.metrics.algorithm_seconds.observe,
            )
        self.lease: Lease | None = None
        self._reasons: dict[str, str] = {}
        self._report = CycleReport()
        self._wake = threading.Event()
        self._awaiting_stop: dict[str, str] = {}
        """Run id → job id of preempted runs: the job re-queues when the backend confirms."""
        self._cancelling: set[str] = set()
        self._dispatched: set[str] = set()
        self._cycles = 0
        self._published_at = float("-inf")
        self._engine_jobs: dict[str, tuple[int, tuple[str, ...], SchedulingJob]] = {}
        self._shares: dict[str, float] = {}

    # --- SchedulerHandle ------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.lease is not None

    def pending_reason(self, job_id: str) -> str | None:
        return self._reasons.get(job_id)

    def last_cycle(self) -> CycleReport:
        return self._report

    def logs(self, job_id: str, request: LogsRequest) -> LogChunk:
        job = self.store.get_job(job_id)
        if job.run is None:
            raise UnknownRun(f"job {job_id} has not run yet")
        backend = self.backends.get(job.run.cluster)
        if backend is None:
            raise UnknownRun(f"cluster {job.run.cluster} has no backend in this replica")
        return backend.logs(replace(request, run_id=job.run.id))

    def wake(self) -> None:
        self._wake.set()

    # --- running --------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Cycle until ``stop`` is set; a failed cycle is logged and the next one retries.

        A wake from the API (a submission, a cancel) starts a full cycle at once; its first
        steps apply transitions. While an async scheduling run is in flight, a cheap
        transitions pass also runs every ``TRANSITION_SECONDS`` between full cycles, so cancels
        and run endings take effect during a long run (Armada's async mode), not a cycle later."""
        next_cycle = 0.0
        try:
            while not stop.is_set():
                try:
                    if time.monotonic() >= next_cycle:
                        self.cycle()
                        next_cycle = time.monotonic() + self.settings.cycle_interval
                    elif self._run_in_flight():
                        self.transitions()
                except Exception:
                    log.exception("scheduling cycle failed; retrying next cycle")
                wait = max(0.0, next_cycle - time.monotonic())
                if self._run_in_flight():
                    wait = min(wait, TRANSITION_SECONDS)
                if self._wake.wait(wait):
                    self._wake.clear()
                    next_cycle = time.monotonic()  # a submission or a cancel: cycle now
        finally:
            self.close()

    def _run_in_flight(self) -> bool:
        return self.runner is not None and self.runner.state in (
            RunnerState.RUN_REQUESTED,
            RunnerState.RUNNING,
        )

    def transitions(self) -> None:
        """Apply what happened since the last pass — run states from the backends, cancel
        requests — without scheduling. Cheap: no snapshot, no heartbeat writes."""
        if self.lease is None:
            return
        try:
            self.jobdb.sync(self.store)
            for backend in self.backends.values():
                try:
                    statuses = backend.poll()
                except BackendUnavailable:
                    continue
                self._record([c for status in statuses for c in self._on_run_status(status)])
            self.jobdb.sync(self.store)
            self._apply_requests()
        except LeaseLostError:
            log.warning("lost the scheduling lease; stopping at once")
            self._lose_lease()

    def close(self) -> None:
        if self.runner is not None:
            self.runner.reset()
        if self.lease is not None:
            try:
                self.store.release_lease(self.lease)
            except StoreError:
                log.warning("could not release the scheduling lease; it will expire")
            self.lease = None
            self.metrics.leader.set(0)

    def cycle(self) -> CycleReport:
        started = time.perf_counter()
        self._cycles += 1
        self.jobdb.sync(self.store)
        self._lead()
        result: CycleResult | None = None
        if self.lease is not None:
            try:
                self._observe_clusters()
                self.jobdb.sync(self.store)
                self._apply_requests()
                self._expire_gangs()
                self.jobdb.sync(self.store)
                self._dispatch_leased()
                self.jobdb.sync(self.store)
                result = self._schedule()
            except LeaseLostError:
                log.warning("lost the scheduling lease during a cycle; stopping at once")
                self._lose_lease()
        seconds = time.perf_counter() - started
        self.metrics.cycle_seconds.observe(seconds)
        self._report = self._make_report(seconds, result)
        return self._report

    # --- leadership -----------------------------------------------------------------------

    def _lead(self) -> None:
        name, ttl = self.settings.lease_name, self.settings.lease_ttl
        if self.lease is not None:
            renewed = self.store.renew_lease(self.lease, ttl)
            if renewed is None:
                self._lose_lease()
            else:
                self.lease = renewed
            return
        acquired = self.store.try_acquire_lease(name, self.settings.replica, ttl)
        if acquired is not None:
            self.lease = acquired
            self.metrics.leader.set(1)
            self._start_leading()

    def _start_leading(self) -> None:
        """A new term: forget the old one's in-flight state and recover from the store."""
        if self.runner is not None:
            self.runner.reset()
        self._awaiting_stop.clear()
        self._cancelling.clear()
        self._dispatched.clear()
        for job in self.jobdb.read_txn().jobs_in_state(JobState.PREEMPTED):
            if job.run is not None:
                self._awaiting_stop[job.run.id] = job.id
                backend = self.backends.get(job.run.cluster)
                if backend is None or not self._still_active(backend, job.run.id):
                    self._requeue_preempted(job.run.id)
        # Runs another replica dispatched: this replica's backends may never have reported
        # them, so ask each for its state once (the backend then watches it like its own).
        for state in (JobState.PENDING, JobState.RUNNING):
            for job in self.jobdb.read_txn().jobs_in_state(state):
                backend = self.backends.get(job.run.cluster) if job.run is not None else None
                if job.run is None or backend is None:
                    continue
                try:
                    status = backend.status(StatusRequest(job.run.id))
                except (UnknownRun, BackendError):
                    continue
                self._record(self._on_run_status(status))

    def _lose_lease(self) -> None:
        self.lease = None
        self.metrics.leader.set(0)
        if self.runner is not None:
            self.runner.reset()
        self._reasons = {}

    # --- transitions ----------------------------------------------------------------------

    def _transition(
        self,
        job_id: str,
        state: JobState,
        reason: str,
        *,
        run: str | None = None,
        exit_code: int | None = None,
        message: str | None = None,
    ) -> None:
        try:
            self.store.transition(
                job_id,
                state,
                reason,
                run=run,
                exit_code=exit_code,
                message=message,
                fence=self.lease,
            )
            self.metrics.transitions.labels(state=state.value).inc()
        except StaleRunError:
            log.info("ignored a report about an old run of job %s", job_id)
        except IllegalTransitionError as error:
            # The job moved on since this cycle read it (e.g. its run ended meanwhile).
            log.info("skipped a transition that no longer applies: %s", error)

    def _observe_clusters(self) -> None:
        now = time.time()
        for record in self.store.list_clusters():
            backend = self.backends.get(record.name)
            if backend is not None:
                try:
                    backend.inventory()
                    statuses = backend.poll()
                except BackendUnavailable as error:
                    log.warning("cluster %s did not answer: %s", record.name, error)
                else:
                    self.store.heartbeat(record.name)
                    if record.state == "unreachable":
                        self.store.set_cluster_state(record.name, "ready")
                    self._record([c for status in statuses for c in self._on_run_status(status)])
                    continue
            seen = record.heartbeat_at.timestamp() if record.heartbeat_at else None
            silent = seen is None or now - seen > self.settings.heartbeat_timeout
            if silent and record.state != "unreachable" and backend is not None:
                self._lose_cluster(record.name)

    def _lose_cluster(self, cluster: str) -> None:
        self.store.set_cluster_state(cluster, "unreachable")
        reason = f"cluster {cluster} became unreachable"
        for state in ACTIVE_JOB_STATES:
            for job in self.jobdb.read_txn().jobs_in_state(state):
                if job.run is not None and job.run.cluster == cluster:
                    self._transition(job.id, JobState.QUEUED, reason, run=job.run.id)

    def _on_run_status(self, status: RunStatus) -> list[Transition]:
        """The job transitions a run's reported state calls for (recorded by the caller, in
        one transaction per poll: thousands of runs starting at once are one write)."""
        if status.run_id in self._awaiting_stop:
            if status.state not in (BackendRunState.PENDING, BackendRunState.RUNNING):
                self._requeue_preempted(status.run_id)
            return []
        job = self.jobdb.read_txn().get(status.job)
        if job is None or job.run is None or job.run.id != status.run_id:
            return []
        state, run = status.state, status.run_id
        changes: list[Transition] = []
        not_yet_running = job.state in (JobState.LEASED, JobState.PENDING)
        ran = state in (
            BackendRunState.RUNNING,
            BackendRunState.SUCCEEDED,
            BackendRunState.FAILED,
        ) or (state is BackendRunState.CANCELLED and status.started_at is not None)
        if not_yet_running and ran:
            # A short run may end between two polls (or before a crashed backend recorded its
            # start): an exit code proves it ran, so its history still shows it running.
            changes.append(Transition(job.id, JobState.RUNNING, "started", run))
        if state is BackendRunState.SUCCEEDED:
            changes.append(Transition(job.id, JobState.SUCCEEDED, "exited 0", run, exit_code=0))
        elif state is BackendRunState.FAILED:
            reason = status.message or f"exited {status.exit_code}"
            changes.append(
                Transition(
                    job.id,
                    JobState.FAILED,
                    reason,
                    run,
                    exit_code=status.exit_code,
                    message=status.message,
                )
            )
        elif state is BackendRunState.CANCELLED:
            self._cancelling.discard(run)
            changes.append(
                Transition(job.id, JobState.CANCELLED, status.message or "cancelled", run)
            )
        elif state is BackendRunState.LOST:
            reason = f"run lost: {status.message}" if status.message else "run lost"
            changes.append(Transition(job.id, JobState.QUEUED, reason, run))
        return changes

    def _record(self, changes: list[Transition]) -> None:
        """Apply transitions in one transaction; if one no longer applies (the job moved on
        meanwhile), apply the others one by one."""
        if not changes:
            return
        try:
            self.store.transition_many(changes, fence=self.lease)
            for change in changes:
                self.metrics.transitions.labels(state=change.new_state.value).inc()
        except (StaleRunError, IllegalTransitionError):
            for change in changes:
                self._transition(
                    change.job_id,
                    change.new_state,
                    change.reason,
                    run=change.run,
                    exit_code=change.exit_code,
                    message=change.message,
                )

    def _requeue_preempted(self, run_id: str) -> None:
        job_id = self._awaiting_stop.pop(run_id)
        job = self.jobdb.read_txn().get(job_id)
        if job is not None and job.state is JobState.PREEMPTED:
            self._transition(job_id, JobState.QUEUED, "re-queued after preemption")

    def _still_active(self, backend: Backend, run_id: str) -> bool:
        try:
            status = backend.status(StatusRequest(run_id))
        except (UnknownRun, BackendError):
            return False
        return status.state in (BackendRunState.PENDING, BackendRunState.RUNNING)

    def _apply_requests(self) -> None:
        """Cancel requests: stop the runs of jobs users asked to cancel."""
        read = self.jobdb.read_txn()
        for state in ACTIVE_JOB_STATES:
            for job in read.jobs_in_state(state):
                if job.cancel_requested and job.run is not None:
                    self._stop_for_cancel(job)

    def _expire_gangs(self) -> None:
        """Gangs still queued past their timeout fail (full cycles only: it reads the backlog)."""
        read = self.jobdb.read_txn()
        now = time.time()
        for job in read.jobs_in_state(JobState.QUEUED):
            gang = job.spec.gang
            if gang is not None and now - job.updated_at.timestamp() > gang.timeout:
                last = self._reasons.get(job.id, "never considered")
                self._transition(
                    job.id,
                    JobState.FAILED,
                    f"gang could not be placed within its timeout of {gang.timeout:g}s: {last}",
                )

    def _stop_for_cancel(self, job: JobRecord) -> None:
        assert job.run is not None
        if job.run.id in self._cancelling:
            return
        backend = self.backends.get(job.run.cluster)
        if backend is None:
            self._transition(job.id, JobState.CANCELLED, "cancelled", run=job.run.id)
            return
        result = backend.cancel(CancelRequest(job.run.id, reason="cancelled by request"))
        if result.outcome in (CancelOutcome.UNKNOWN_RUN, CancelOutcome.ALREADY_FINISHED):
            if result.outcome is CancelOutcome.UNKNOWN_RUN or job.state is JobState.LEASED:
                self._transition(job.id, JobState.CANCELLED, "cancelled", run=job.run.id)
            return
        self._cancelling.add(job.run.id)

    # --- dispatch -------------------------------------------------------------------------

    def _dispatch_leased(self) -> None:
        self._dispatch_all(
            job
            for job in self.jobdb.read_txn().jobs_in_state(JobState.LEASED)
            if job.run is not None
            and job.run.id not in self._dispatched
            and not job.cancel_requested
        )

    def _dispatch_all(self, jobs: Iterable[JobRecord]) -> None:
        """Dispatch each job's run, then record every outcome in one transaction (one per job
        made dispatch the slowest part of a cycle: ~35 jobs/s on SQLite)."""
        self._record([change for job in jobs if (change := self._dispatch(job)) is not None])

    def _dispatch(self, job: JobRecord) -> Transition | None:
        """Hand the run to its backend; the transition that records what happened, if any."""
        run = job.run
        assert run is not None
        backend = self.backends.get(run.cluster)
        if backend is None:
            return None
        request = DispatchRequest(
            run_id=run.id,
            job=job.id,
            cluster=run.cluster,
            placements=tuple(
                ReplicaPlacement(
                    task=item["task"],
                    replica=int(item["replica"]),
                    node=item["node"],
                    gpu_ids=tuple(int(device) for device in item.get("gpus", ())),
                )
                for item in run.assignment.get("placements", [])
            ),
            payload=job.spec.payload,
            job_type=job.spec.type,
            env={"FLOTILLA_QUEUE": job.queue, "FLOTILLA_JOB_NAME": job.name},
            max_runtime=job.spec.max_runtime,
        )
        try:
            backend.dispatch(request)
        except DispatchRejected as error:
            return Transition(
                job.id, JobState.FAILED, f"rejected by {run.cluster}: {error}", run.id
            )
        except BackendUnavailable as error:
            log.warning("dispatch of %s to %s failed, retrying: %s", job.id, run.cluster, error)
            return None
        self._dispatched.add(run.id)
        return Transition(job.id, JobState.PENDING, f"dispatched to {run.cluster}", run.id)

    # --- scheduling -----------------------------------------------------------------------

    def _schedule(self) -> CycleResult | None:
        if self.runner is None:
            state = self._build_snapshot()
            result = self.algorithm.schedule(state.snapshot)
            self.metrics.algorithm_seconds.observe(result.stats.seconds)
            self._commit(result, state)
            return result
        ready = self.runner.take_result()
        committed: CycleResult | None = None
        if ready is not None:
            state = self._build_snapshot(include_queued=False)  # reconcile needs node state only
            reconciled = reconcile(ready, _CurrentState(self.jobdb, state))
            self._commit(reconciled.result, state, dropped=reconciled.dropped)
            committed = reconciled.result
        if self.runner.state is RunnerState.IDLE:
            self.jobdb.sync(self.store)
            if self.jobdb.read_txn().count(JobState.QUEUED):
                self.runner.trigger(self._build_snapshot().snapshot)
        return committed

    def _engine_job(self, record: JobRecord, space: ResourceSpace) -> SchedulingJob:
        """The engine's job for a record, built once per (serial, resource layout)."""
        cached = self._engine_jobs.get(record.id)
        if cached is not None and cached[0] == record.serial and cached[1] == space.names:
            return cached[2]
        job = job_from_record(record, space)
        self._engine_jobs[record.id] = (record.serial, space.names, job)
        return job

    def _build_snapshot(self, *, include_queued: bool = True) -> _Snapshot:
        read = self.jobdb.read_txn()
        records = self.store.list_clusters()
        queued_records = read.jobs_in_state(JobState.QUEUED) if include_queued else []
        active_records = [job for state in ACTIVE_JOB_STATES for job in read.jobs_in_state(state)]
        cluster_specs = [ClusterSpec.model_validate(record.spec) for record in records]
        space = space_for(cluster_specs, [job.spec for job in active_records])
        clusters = {
            record.name: cluster_from_record(record, order, space)
            for order, record in enumerate(records)
        }
        running: list[RunningJob] = []
        for job in active_records:
            if job.run is None or job.run.cluster not in clusters:
                continue
            cluster = clusters[job.run.cluster]
            engine_job = self._engine_job(job, space)
            assignment = assignment_from_json(job.run.assignment, engine_job, cluster)
            if assignment is None:
                continue
            for placement in assignment.placements:
                cluster.nodes.allocate(placement.row, placement.request, placement.gpus)
            running.append(RunningJob(engine_job, assignment, job.run.created_at.timestamp()))
        reasons: dict[str, str] = {}
        queued = []
        if len(self._engine_jobs) > 4 * (len(queued_records) + len(active_records)) + 1000:
            live = {job.id for job in queued_records} | {job.id for job in active_records}
            self._engine_jobs = {k: v for k, v in self._engine_jobs.items() if k in live}
        for job in queued_records:
            missing = unknown_resources(job.spec, space)
            if missing:
                reasons[job.id] = f"no node of any cluster offers {', '.join(missing)}"
                continue
            queued.append(self._engine_job(job, space))
        queue_specs = self.store.list_queues()
        queues = [
            QueueInfo(
                name=spec.name,
                weight=spec.weight,
                order=order,
                quota=spec.quota,
                preemption=spec.preemption,
            )
            for order, spec in enumerate(queue_specs)
        ]
        quota_specs = self.store.list_quotas()
        quotas = QuotaTree(quota_specs, space) if quota_specs else None
        snapshot = SchedulingSnapshot(
            time=time.time(),
            clusters=list(clusters.values()),
            queues=queues,
            queued=queued,
            running=running,
            quotas=quotas,
        )
        return _Snapshot(snapshot, clusters, reasons)

    def _commit(
        self, result: CycleResult, state: _Snapshot, *, dropped: Mapping[str, str] | None = None
    ) -> None:
        read = self.jobdb.read_txn()
        for eviction in result.preempted:
            victim = read.get(eviction.job)
            if victim is None or victim.run is None or victim.state not in ACTIVE_JOB_STATES:
                continue
            backend = self.backends.get(victim.run.cluster)
            if backend is not None:
                backend.cancel(CancelRequest(victim.run.id, reason=eviction.reason))
                self._awaiting_stop[victim.run.id] = victim.id
            self._transition(victim.id, JobState.PREEMPTED, eviction.reason, run=victim.run.id)
            self.metrics.preemptions.labels(queue=victim.queue).inc()
            cluster = state.clusters.get(victim.run.cluster)
            if cluster is not None:
                held = assignment_from_json(
                    victim.run.assignment, job_from_record(victim, cluster.nodes.space), cluster
                )
                for placement in held.placements if held else ():
                    cluster.nodes.release(placement.row, placement.request, placement.gpus)
        requests = []
        for decision in result.scheduled:
            record = read.get(decision.job.name)
            if record is None or record.state is not JobState.QUEUED:
                continue  # a non-strict gang growing: not supported by the service yet
            if dropped is not None:
                unfit = _CurrentState(self.jobdb, state).room_for(decision.assignment)
                if unfit is not None:
                    state.reasons[record.id] = f"decision dropped: {unfit}"
                    continue
            requests.append(
                RunRequest(
                    job_id=record.id,
                    cluster=decision.assignment.cluster,
                    assignment=assignment_to_json(decision.assignment),
                    reason=f"scheduled on {decision.assignment.cluster}",
                )
            )
        if requests:
            self.store.record_runs(requests, fence=self.lease)
            self.jobdb.sync(self.store)
            fresh = self.jobdb.read_txn()
            leased = (fresh.get(request.job_id) for request in requests)
            self._dispatch_all(
                job for job in leased if job is not None and job.state is JobState.LEASED
            )
        self.metrics.decisions.labels(outcome="scheduled").inc(len(requests))
        self.metrics.decisions.labels(outcome="unschedulable").inc(len(result.pending))
        reasons = dict(state.reasons)
        reasons.update(result.pending)
        for name, why in (dropped or {}).items():
            reasons[name] = f"decision dropped: {why}"
        self._reasons = reasons

    # --- reporting ------------------------------------------------------------------------

    def _publish_allocation(self, read: Any) -> dict[str, float]:
        """Per queue: resources held (by requests of active runs) and weighted dominant share
        of the fleet, as gauges; returns the shares."""
        capacity: dict[str, float] = {}
        for record in self.store.list_clusters():
            if record.state == "unreachable":
                continue
            for group in ClusterSpec.model_validate(record.spec).nodes:
                for name, amount in group.resources.items():
                    capacity[name] = capacity.get(name, 0.0) + amount * (group.count or 1)
        held: dict[str, dict[str, float]] = {}
        for state in ACTIVE_JOB_STATES:
            for job in read.jobs_in_state(state):
                mine = held.setdefault(job.queue, {})
                for task in job.spec.tasks:
                    for name, amount in task.resources.items():
                        mine[name] = mine.get(name, 0.0) + amount * task.replicas
        weights = {spec.name: spec.weight for spec in self.store.list_queues()}
        shares: dict[str, float] = {}
        for queue in set(weights) | set(held):
            amounts = held.get(queue, {})
            for name in capacity:
                self.metrics.allocated.labels(queue=queue, resource=name).set(
                    amounts.get(name, 0.0)
                )
            fractions = [amounts.get(n, 0.0) / c for n, c in capacity.items() if c > 0]
            shares[queue] = max(fractions, default=0.0) / weights.get(queue, 1.0)
            self.metrics.dominant_share.labels(queue=queue).set(shares[queue])
        return shares

    def _make_report(self, seconds: float, result: CycleResult | None) -> CycleReport:
        read = self.jobdb.read_txn()
        queued: dict[str, int] = {}
        running: dict[str, int] = {}
        for job in read.jobs_in_state(JobState.QUEUED):
            queued[job.queue] = queued.get(job.queue, 0) + 1
        for state in ACTIVE_JOB_STATES:
            for job in read.jobs_in_state(state):
                running[job.queue] = running.get(job.queue, 0) + 1
        for queue in set(queued) | set(running) | set(self._report.queued_by_queue):
            self.metrics.queue_depth.labels(queue=queue).set(queued.get(queue, 0))
            self.metrics.running_jobs.labels(queue=queue).set(running.get(queue, 0))
        now = time.monotonic()
        if now - self._published_at >= ALLOCATION_PUBLISH_SECONDS:
            self._published_at = now
            self._shares = self._publish_allocation(read)
        shares = self._shares
        return CycleReport(
            number=self._cycles,
            finished_at=time.time(),
            seconds=seconds,
            algorithm_seconds=result.stats.seconds if result is not None else None,
            leader=self.is_leader,
            considered=result.stats.considered if result else 0,
            scheduled=result.stats.scheduled if result else 0,
            preempted=result.stats.preempted if result else 0,
            queued_by_queue=queued,
            running_by_queue=running,
            dominant_share=shares,
            runner_state=self.runner.state.value if self.runner else None,
        )


class _CurrentState:
    """Reconciliation's view of now: the JobDb and freshly built node tables."""

    def __init__(self, jobdb: JobDb, state: _Snapshot) -> None:
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
