"""Job transitions from what the backends report and what users asked for.

Run states become job states (running, succeeded, failed, cancelled; a lost run re-queues its
job); clusters that stop answering become unreachable and their runs re-queue; cancel
requests stop runs; preempted runs re-queue their job once the backend confirms the stop;
gangs past their timeout fail. Every write is fenced by the lease. Transitions are gathered
for the loop's next flush (``writes.py``): a pass's reports, however many, are one write.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from flotilla.backends.interface import (
    Backend,
    BackendError,
    BackendRunState,
    BackendUnavailable,
    CancelOutcome,
    CancelRequest,
    RunStatus,
    StatusRequest,
    UnknownRun,
)
from flotilla.faults import crash_point
from flotilla.lifecycle.gangs import timeout_reason
from flotilla.lifecycle.runs import CAUSE_OF, RunEnd, RunEnded, after_run
from flotilla.model import ClusterSpec
from flotilla.model.cluster import GpuSharing
from flotilla.model.node_info import NodeInfo
from flotilla.service.containment import NOT_CONTAINED
from flotilla.service.context import LoopContext
from flotilla.service.engine_times import with_engine_times
from flotilla.service.gpu_metrics import GpuUseMetrics
from flotilla.service.records import cluster_spec_from_inventory
from flotilla.service.retry import counted_failures, end_of, transition_for
from flotilla.service.writes import CycleWrites
from flotilla.stage_trace import trace
from flotilla.store import (
    ACTIVE_JOB_STATES,
    ClusterRecord,
    JobRecord,
    JobState,
    Transition,
)

log = logging.getLogger(__name__)


ClusterSpecBuilder = Callable[[ClusterRecord, Sequence[NodeInfo]], ClusterSpec]
"""The cluster as the store keeps it, from its record and the nodes its backend reports."""


def spec_from_record(record: ClusterRecord, nodes: Sequence[NodeInfo]) -> ClusterSpec:
    """Refreshed nodes, everything else as recorded (labels, cost, backend, gpu_sharing)."""
    spec = cluster_spec_from_inventory(record.name, record.backend, nodes, labels=record.labels)
    update: dict[str, Any] = {}
    if cost := record.spec.get("cost"):
        update["cost"] = dict(cost)
    if sharing := record.spec.get("gpu_sharing"):
        update["gpu_sharing"] = GpuSharing(sharing)
    return spec.model_copy(update=update) if update else spec


class RunTransitions:
    def __init__(
        self,
        context: LoopContext,
        writes: CycleWrites,
        heartbeat_timeout: float,
        cluster_spec: ClusterSpecBuilder = spec_from_record,
    ) -> None:
        self._context = context
        self._writes = writes
        self._heartbeat_timeout = heartbeat_timeout
        self._cluster_spec = cluster_spec
        self._inventories: dict[str, tuple[NodeInfo, ...]] = {}
        """Cluster → the nodes last recorded in the store by this replica: a change (a node
        added, drained, resized) is written once, not every cycle."""
        self._unverified: dict[str, str] = {}
        """Job id → run id of runs the store believes active that a backend could not be
        asked about yet (engine unreachable): asked again until it answers."""
        self._orphans: dict[str, set[str]] = {}
        """Cluster → runs re-queued when it became unreachable: stopped when it answers
        again, since the engine may have kept them running. (A new leader's fresh backends
        report every active run on their first poll, which finds the same orphans.)"""
        """A cluster whose backend has not answered for this long becomes unreachable."""
        self._gpu_metrics = GpuUseMetrics(context.metrics)
        self._heartbeats: dict[str, float] = {}
        """Cluster → when this replica last recorded its heartbeat (monotonic)."""
        self.awaiting_stop: dict[str, str] = {}
        """Run id → job id of preempted runs: the job re-queues when the backend confirms."""
        self._cancelling: dict[str, str] = {}
        """Run id → cluster of runs asked to stop for a cancel, not yet seen to end."""

    @property
    def cancelling(self) -> bool:
        """Whether a cancelled run has not been seen to end yet (the loop then polls often)."""
        return bool(self._cancelling)

    def forget(self) -> None:
        """A new term: the old term's in-flight state is recovered from the store instead."""
        self.awaiting_stop.clear()
        self._cancelling.clear()
        self._unverified.clear()
        self._inventories.clear()

    # --- recording ------------------------------------------------------------------------

    def transition(
        self,
        job_id: str,
        state: JobState,
        reason: str,
        *,
        run: str | None = None,
        exit_code: int | None = None,
        message: str | None = None,
    ) -> None:
        """Record one transition now (with whatever waits for the next flush, in order); one
        that no longer applies is skipped (``writes.py``)."""
        self.record([Transition(job_id, state, reason, run, exit_code, message)])
        self._writes.flush()

    def record(self, changes: list[Transition]) -> None:
        """Transitions for the next flush of the cycle's writes (``writes.py``): the loop
        writes what a pass gathered in one transaction."""
        self._writes.add(changes)

    # --- what the backends report ---------------------------------------------------------

    def poll(self, backend: Backend) -> None:
        """Record what ``backend`` reports changed since its last poll."""
        self._apply_statuses(backend, backend.poll())

    def _apply_statuses(self, backend: Backend, statuses: Sequence[RunStatus]) -> None:
        contain = self._context.faults.contain
        changes: list[Transition] = []
        for status in statuses:
            with contain("its run's report", status.job, status.run_id):
                changes += self.on_run_status(status)
        self.record(changes)
        uses = {status.run_id: status.gpu for status in statuses if status.gpu is not None}
        if uses:  # figures only, no state: a write of their own, not the cycle's
            self._context.store.record_gpu_use(uses)
        read = self._context.jobdb.read_txn()

        def queue_of(job_id: str) -> str | None:
            job = read.get(job_id)
            return None if job is None else job.queue

        self._gpu_metrics.observe(statuses, queue_of)
        for status in statuses:
            with contain("stopping an orphaned run", status.job, status.run_id):
                self._stop_if_orphaned(backend, status)

    def _stop_if_orphaned(self, backend: Backend, status: RunStatus) -> None:
        """Stop a run that is active in the engine although its job moved on: re-queued when
        its cluster was unreachable (and runs again elsewhere), or already finished. Without
        this, a cluster coming back would run the job twice."""
        if status.state not in (BackendRunState.PENDING, BackendRunState.RUNNING):
            return
        if status.run_id in self.awaiting_stop or status.run_id in self._cancelling:
            return
        job = self._context.jobdb.read_txn().get(status.job)
        if job is None:
            return
        current = job.run is not None and job.run.id == status.run_id
        if current and job.state in ACTIVE_JOB_STATES:
            return
        if current and job.state is JobState.PREEMPTED:
            return
        log.warning(
            "run %s of job %s is active on %s but the job is %s: stopping it",
            status.run_id,
            job.id,
            status.cluster,
            job.state.value,
        )
        with contextlib.suppress(BackendUnavailable):  # reported again by a later poll
            backend.cancel(
                CancelRequest(status.run_id, reason=f"superseded: the job is {job.state.value}")
            )

    def poll_cancelling(self) -> None:
        """Ask only about the runs being stopped for a cancel (the fast path while one is
        pending): O(cancels), not O(active runs) as a backend's ``poll`` may be. A run that
        ended is recorded at once; ``poll`` reports it again later, which finds the job
        finished and changes nothing."""
        context = self._context
        changes: list[Transition] = []
        for run_id, cluster in list(self._cancelling.items()):
            backend = context.backends.get(cluster)
            if backend is None:
                continue
            try:
                status = backend.status(StatusRequest(run_id))
            except UnknownRun:
                self._cancelling.pop(run_id, None)  # the next full poll settles its job
                continue
            except BackendError:
                continue
            if status.state not in (BackendRunState.PENDING, BackendRunState.RUNNING):
                with self._context.faults.contain("its run's report", status.job, run_id):
                    changes += self.on_run_status(status)
                self._cancelling.pop(run_id, None)  # ended (maybe succeeded first): no more polls
        if changes:
            self.record(changes)
            self._writes.flush()

    def poll_all(self) -> None:
        for backend in self._context.backends.values():
            try:
                self.poll(backend)
            except BackendUnavailable:
                continue

    def observe_clusters(self) -> None:
        """Poll every cluster with a backend here and refresh its nodes from its inventory;
        one silent for too long is lost."""
        context = self._context
        now = time.time()
        for record in context.store.list_clusters():
            backend = context.backends.get(record.name)
            if backend is not None:
                try:
                    inventory = backend.inventory()
                    statuses = backend.poll()
                except BackendUnavailable as error:
                    log.warning("cluster %s did not answer: %s", record.name, error)
                else:
                    self._heartbeat(record.name)
                    if self._inventories.get(record.name) != inventory.nodes and inventory.nodes:
                        context.store.upsert_cluster(self._cluster_spec(record, inventory.nodes))
                        self._inventories[record.name] = inventory.nodes
                    elif record.state == "unreachable":
                        context.store.set_cluster_state(record.name, "ready")
                    self._apply_statuses(backend, statuses)
                    self._verify(record.name, backend)
                    self._stop_orphans(record.name, backend)
                    continue
            seen = record.heartbeat_at.timestamp() if record.heartbeat_at else None
            silent = seen is None or now - seen > self._heartbeat_timeout
            if silent and record.state != "unreachable" and backend is not None:
                self._lose_cluster(record.name)

    def _heartbeat(self, cluster: str) -> None:
        """Record that ``cluster`` answered, at most every tenth of the heartbeat timeout (and
        at least every second): a heartbeat is a durable write, and one per 0.1 s cycle held
        up the transitions queued behind it."""
        now = time.monotonic()
        every = min(1.0, self._heartbeat_timeout / 10)
        if now - self._heartbeats.get(cluster, float("-inf")) >= every:
            self._context.store.heartbeat(cluster)
            self._heartbeats[cluster] = now

    def _lose_cluster(self, cluster: str) -> None:
        context = self._context
        context.store.set_cluster_state(
            cluster,
            "unreachable",
            reason=f"its backend has not answered for {self._heartbeat_timeout:g} s",
        )
        reason = f"cluster {cluster} became unreachable"
        read = context.jobdb.read_txn()
        orphans = self._orphans.setdefault(cluster, set())
        for state in ACTIVE_JOB_STATES:
            for job in read.jobs_in_state(state):
                if job.run is not None and job.run.cluster == cluster:
                    if state is not JobState.LEASED:
                        orphans.add(job.run.id)
                    with context.faults.contain("losing its cluster", job.id, job.run.id):
                        self.record([self.after_run(job, RunEnd.NODE_FAILURE, reason)])
        self._writes.flush()

    def _stop_orphans(self, cluster: str, backend: Backend) -> None:
        """Stop the runs re-queued while ``cluster`` was unreachable (it answers again)."""
        for run_id in sorted(self._orphans.pop(cluster, ())):
            try:
                backend.cancel(
                    CancelRequest(run_id, reason=f"superseded: re-queued when {cluster} was lost")
                )
            except BackendUnavailable:
                self._orphans.setdefault(cluster, set()).add(run_id)

    def on_run_status(self, status: RunStatus) -> list[Transition]:
        """The job transitions a run's reported state calls for (recorded by the caller, in
        one transaction per poll: thousands of runs starting at once are one write)."""
        if status.run_id in self.awaiting_stop:
            if status.state not in (BackendRunState.PENDING, BackendRunState.RUNNING):
                self.requeue_preempted(status.run_id)
            return []
        job = self._context.jobdb.read_txn().get(status.job)
        if job is None or job.run is None or job.run.id != status.run_id:
            return []
        if job.state not in ACTIVE_JOB_STATES:
            return []  # re-queued (its cluster was lost) or finished: the run is an orphan
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
        cancelled = job.cancel_requested or run in self._cancelling
        if state is BackendRunState.SUCCEEDED:
            end, reason = RunEnd.SUCCEEDED, ""
        elif state is BackendRunState.CANCELLED:
            end, reason = RunEnd.CANCELLED, status.message
        elif state is BackendRunState.FAILED:
            end, reason = end_of(status), status.message or f"exited {status.exit_code}"
        elif state is BackendRunState.LOST:
            end = RunEnd.LOST
            reason = f"run lost: {status.message}" if status.message else "run lost"
        else:
            return changes
        if end is RunEnd.CANCELLED or (cancelled and end is not RunEnd.SUCCEEDED):
            self._cancelling.pop(run, None)
            trace("exit-observed", job.id)
        changes.append(
            self.after_run(
                job,
                end,
                reason,
                cancel_requested=cancelled,
                exit_code=status.exit_code,
                message=status.message or None,
            )
        )
        return with_engine_times(changes, status)

    def after_run(
        self,
        job: JobRecord,
        end: RunEnd,
        reason: str,
        *,
        cancel_requested: bool = False,
        exit_code: int | None = None,
        message: str | None = None,
    ) -> Transition:
        """The transition the lifecycle core calls for when ``job``'s current run ended
        (``flotilla/lifecycle/runs.py``); its counted failures are read only when it has a
        retry policy. A policy that cannot be applied fails the job, naming it."""
        run = job.run
        assert run is not None
        failures = 0
        if job.spec.retry is not None and end in CAUSE_OF:
            failures = counted_failures(self._context.store.runs(job.id))
        ended = RunEnded(end, reason, run.attempt, failures, cancel_requested)
        try:
            outcome = after_run(job.spec, ended)
        except NOT_CONTAINED:
            raise
        except Exception as error:  # its retry policy cannot be applied (a delay past any date)
            why = self._context.faults.note("its retry policy", job.id, error)
            return Transition(
                job.id,
                JobState.FAILED,
                f"{reason}; {why}" if reason else why,
                run.id,
                exit_code=exit_code,
                message=message,
            )
        if outcome.state is JobState.CANCELLED and end is RunEnd.CANCELLED:
            return Transition(job.id, JobState.CANCELLED, outcome.reason, run.id)
        return transition_for(job, outcome, ended, run.id, exit_code=exit_code, message=message)

    # --- preemption -----------------------------------------------------------------------

    def requeue_preempted(self, run_id: str) -> None:
        job_id = self.awaiting_stop.pop(run_id)
        job = self._context.jobdb.read_txn().get(job_id)
        if job is not None and job.state is JobState.PREEMPTED:
            self.transition(job_id, JobState.QUEUED, "re-queued after preemption")

    def still_active(self, backend: Backend, run_id: str) -> bool:
        """Whether the run may still hold its resources: an engine that cannot be asked
        counts as yes (the preempted job re-queues once it answers), one that never had the
        run as no."""
        try:
            status = backend.status(StatusRequest(run_id))
        except UnknownRun:
            return False
        except BackendError:
            return True
        return status.state in (BackendRunState.PENDING, BackendRunState.RUNNING)

    def recover(self) -> None:
        """A new term: find the previous term's preempted runs and the runs another replica
        dispatched, from the store and the backends."""
        context = self._context
        for job in context.jobdb.read_txn().jobs_in_state(JobState.PREEMPTED):
            if job.run is not None:
                self.awaiting_stop[job.run.id] = job.id
                backend = context.backends.get(job.run.cluster)
                if backend is None or not self.still_active(backend, job.run.id):
                    self.requeue_preempted(job.run.id)
        # Runs another replica dispatched (adoption after a failover): this replica's
        # backends may never have reported them, so ask each for its state once (the backend
        # then watches it like its own). An engine that has no record of a run lost it; one
        # that cannot be reached is asked again every cycle until it answers.
        for state in (JobState.PENDING, JobState.RUNNING):
            for job in context.jobdb.read_txn().jobs_in_state(state):
                if job.run is not None:
                    self._unverified[job.id] = job.run.id
        for cluster in {job.run.cluster for job in self._jobs(self._unverified) if job.run}:
            backend = context.backends.get(cluster)
            if backend is not None:
                self._verify(cluster, backend)

    def _jobs(self, job_ids: Iterable[str]) -> list[JobRecord]:
        read = self._context.jobdb.read_txn()
        return [job for job_id in list(job_ids) if (job := read.get(job_id)) is not None]

    def _verify(self, cluster: str, backend: Backend) -> None:
        """Ask ``backend`` about the runs on ``cluster`` not confirmed since this term began."""
        if not self._unverified:
            return
        changes: list[Transition] = []
        for job in self._jobs(self._unverified):
            run_id = self._unverified[job.id]
            if job.run is None or job.run.id != run_id or job.state not in ACTIVE_JOB_STATES:
                del self._unverified[job.id]
                continue
            if job.run.cluster != cluster:
                continue
            try:
                status = backend.status(StatusRequest(run_id))
            except UnknownRun:
                del self._unverified[job.id]
                reason = f"run lost: cluster {cluster} has no record of run {run_id}"
                log.warning("job %s: %s; re-queued", job.id, reason)
                changes.append(self.after_run(job, RunEnd.LOST, reason))
                continue
            except BackendError as error:
                log.warning("cluster %s: cannot ask about run %s yet: %s", cluster, run_id, error)
                break  # the engine is down: ask again next cycle
            del self._unverified[job.id]
            with self._context.faults.contain("its run's report", job.id, run_id):
                changes += self.on_run_status(status)
        for job_id in [
            j for j in self._unverified if self._context.jobdb.read_txn().get(j) is None
        ]:
            del self._unverified[job_id]
        self.record(changes)

    # --- what users asked for -------------------------------------------------------------

    def apply_cancel_requests(self) -> None:
        """Stop the runs of jobs users asked to cancel (O(active jobs), not O(backlog))."""
        read = self._context.jobdb.read_txn()
        for state in ACTIVE_JOB_STATES:
            for job in read.jobs_in_state(state):
                if job.cancel_requested and job.run is not None:
                    with self._context.faults.contain("its cancel", job.id, job.run.id):
                        self._stop_for_cancel(job)

    def stop_for_cancels(self, jobs: Iterable[JobRecord], stopped: set[str] | None = None) -> bool:
        """Stop the runs of jobs whose cancel the API in this process has just committed,
        before the change feed brings the requests (``SchedulingLoop.cancelled``); the runs in
        ``stopped`` the API's thread stopped itself (``cancel_signal.py``): they are only
        followed, and taken out of it. A job the JobDb already holds at least as new is taken
        from there (it may have ended). True when a run is now followed that was not before."""
        stopping = len(self._cancelling)
        read = self._context.jobdb.read_txn()
        for handed in jobs:
            signalled = None
            if handed.run is not None and stopped is not None and handed.run.id in stopped:
                signalled = handed.run.id
                stopped.discard(signalled)
            job = read.get(handed.id)
            if job is None or job.serial < handed.serial:
                job = handed
            if job.cancel_requested and job.run is not None and job.state in ACTIVE_JOB_STATES:
                with self._context.faults.contain("its cancel", job.id, job.run.id):
                    self._stop_for_cancel(job, signalled=job.run.id == signalled)
        return len(self._cancelling) > stopping

    def _stop_for_cancel(self, job: JobRecord, *, signalled: bool = False) -> None:
        """Ask the backend to stop the run once (``signalled``: it was asked already); the
        job becomes cancelled when the backend reports the run ended (or at once if the
        backend never had it)."""
        assert job.run is not None
        if job.run.id in self._cancelling:
            return
        trace("loop-seen", job.id)
        backend = self._context.backends.get(job.run.cluster)
        if backend is None:
            self.transition(job.id, JobState.CANCELLED, "cancelled", run=job.run.id)
            return
        if signalled:
            self._cancelling[job.run.id] = job.run.cluster
            return
        try:
            result = backend.cancel(CancelRequest(job.run.id, reason="cancelled by request"))
        except BackendUnavailable as error:
            log.warning("cancel of %s waits for %s: %s", job.id, job.run.cluster, error)
            return  # asked again next pass
        trace("backend-signalled", job.id)
        crash_point("during-cancel")
        if result.outcome is CancelOutcome.UNKNOWN_RUN or (
            result.outcome is CancelOutcome.ALREADY_FINISHED and job.state is JobState.LEASED
        ):
            self.transition(job.id, JobState.CANCELLED, "cancelled", run=job.run.id)
            return
        # Followed to its end — also a run already finished: the API's thread may have stopped
        # it before this pass (``cancel_signal.py``), and the next status request records it.
        self._cancelling[job.run.id] = job.run.cluster

    def expire_gangs(self, gangs: Iterable[JobRecord]) -> None:
        """Queued gangs past their timeout fail, with the last reason they waited for."""
        now = time.time()
        for job in gangs:
            with self._context.faults.contain("its gang timeout", job.id):
                gang = job.spec.gang
                if gang is not None and now - self._waiting_since(job) > gang.timeout:
                    last = self._context.reasons.get(job.id)
                    self.transition(job.id, JobState.FAILED, timeout_reason(job.spec, last))

    def _waiting_since(self, job: JobRecord) -> float:
        """When a queued job became schedulable: its last write, or the end of its last
        dependency if later (a gang's timeout counts from when it could be placed)."""
        since = job.updated_at.timestamp()
        if job.dependencies:
            read = self._context.jobdb.read_txn()
            for dependency in job.dependencies:
                found = read.get(dependency.job_id)
                if found is not None:
                    since = max(since, found.updated_at.timestamp())
        return since

    def fail_unmet_dependencies(self, never: Mapping[str, str]) -> None:
        """Queued jobs whose dependency can never be met fail, naming it (one write)."""
        self.record(
            [Transition(job_id, JobState.FAILED, reason) for job_id, reason in never.items()]
        )
