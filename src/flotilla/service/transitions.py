"""Job transitions from what the backends report and what users asked for.

Each is an event stepped through the lifecycle core (``lifecycle/machine.py``) and its
effects applied here: run states become job states (running, succeeded, failed, cancelled; a
lost run re-queues its job, a retry policy may re-queue a failed one after its backoff);
cancel requests stop runs; preempted runs re-queue their job once the backend confirms the
stop; gangs past their timeout fail. Clusters that stop answering are watched by
``cluster_watch.py``. Every write is fenced by the lease. Transitions are gathered
for the loop's next flush (``writes.py``): a pass's reports, however many, are one write.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Mapping, Sequence

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
from flotilla.lifecycle import machine
from flotilla.lifecycle.effects import SetState
from flotilla.lifecycle.events import (
    CancelRequested,
    Faulted,
    RunEnded,
    RunStarted,
    TimerFired,
    TimerKind,
)
from flotilla.lifecycle.gangs import fails_with
from flotilla.lifecycle.runs import CAUSE_OF, RunEnd
from flotilla.model.job import JobSpec
from flotilla.service import effects
from flotilla.service.checkpoints import new_checkpoints
from flotilla.service.cluster_watch import ClusterSpecBuilder, ClusterWatch, spec_from_record
from flotilla.service.containment import NOT_CONTAINED
from flotilla.service.context import LoopContext
from flotilla.service.engine_times import with_engine_times
from flotilla.service.engines import level_of
from flotilla.service.gpu_metrics import GpuUseMetrics
from flotilla.service.retry import (
    change_for,
    counted_failures,
    end_of,
    failure_reason,
    transition_for,
    view_of,
)
from flotilla.service.writes import CycleWrites
from flotilla.stage_trace import trace
from flotilla.store import (
    ACTIVE_JOB_STATES,
    JobRecord,
    JobState,
    Transition,
)

log = logging.getLogger(__name__)


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
        self.clusters = ClusterWatch(context, self, heartbeat_timeout, cluster_spec)
        self._gpu_metrics = GpuUseMetrics(context.metrics)
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
        self._context.holds.clear()
        self.clusters.forget()

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

    def flush(self) -> None:
        self._writes.flush()

    def record(self, changes: list[Transition]) -> None:
        """Transitions for the next flush of the cycle's writes (``writes.py``): the loop
        writes what a pass gathered in one transaction."""
        self._writes.add(changes)

    # --- what the backends report ---------------------------------------------------------

    def poll(self, backend: Backend) -> None:
        """Record what ``backend`` reports changed since its last poll."""
        self.apply_statuses(backend, backend.poll())

    def apply_statuses(self, backend: Backend, statuses: Sequence[RunStatus]) -> None:
        contain = self._context.faults.contain
        changes: list[Transition] = []
        for status in statuses:
            with contain("its run's report", status.job, status.run_id):
                changes += self.on_run_status(status)
        self.record(changes)
        uses = {status.run_id: status.gpu for status in statuses if status.gpu is not None}
        if uses:  # figures only, no state: a write of their own, not the cycle's
            self._context.store.record_gpu_use(uses)
        measured = {
            status.run_id: status.resources
            for status in statuses
            if status.resources is not None and status.state.terminal
        }
        if measured:  # an ended run's CPU time and peak memory (``flotilla sacct``)
            self._context.store.record_run_resources(measured)
        read = self._context.jobdb.read_txn()

        def queue_of(job_id: str) -> str | None:
            job = read.get(job_id)
            return None if job is None else job.queue

        self._gpu_metrics.observe(statuses, queue_of)
        reports = new_checkpoints(self._context.jobdb, statuses)
        self._context.store.record_checkpoints(reports, fence=self._context.lease)
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
        """Poll every cluster and lose the silent ones (``cluster_watch.py``)."""
        self.clusters.observe()

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
            started = machine.step(view_of(job), RunStarted()).state
            if started is not None:
                changes.append(Transition(job.id, started.state, started.reason, run))
        cancelled = job.cancel_requested or run in self._cancelling
        if state is BackendRunState.SUCCEEDED:
            end, reason = RunEnd.SUCCEEDED, ""
        elif state is BackendRunState.CANCELLED:
            end, reason = RunEnd.CANCELLED, status.message
        elif state is BackendRunState.FAILED:
            end, reason = end_of(status), failure_reason(status)
        elif state is BackendRunState.LOST:
            end = RunEnd.LOST
            reason = f"run lost: {status.message}" if status.message else "run lost"
        else:
            return changes
        if end is RunEnd.CANCELLED or (cancelled and end is not RunEnd.SUCCEEDED):
            self._cancelling.pop(run, None)
            trace("exit-observed", job.id)
        changes += self.after_run(
            job,
            end,
            reason,
            cancel_requested=cancelled,
            exit_code=status.exit_code,
            message=status.message or None,
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
    ) -> list[Transition]:
        """The transition the lifecycle core calls for when ``job``'s current run ended
        (``lifecycle/machine.py``); its counted failures are read only when it has a retry
        policy. A policy that cannot be applied fails the job, naming it."""
        run = job.run
        assert run is not None
        failures = 0
        if job.spec.retry is not None and end in CAUSE_OF:
            failures = counted_failures(self._context.store.runs(job.id))
        view = view_of(
            job, failures=failures, cancel_requested=job.cancel_requested or cancel_requested
        )
        ended = RunEnded(end, reason, exit_code, message)
        try:
            step = machine.step(view, ended)
        except NOT_CONTAINED:
            raise
        except Exception as error:  # its retry policy cannot be applied (a delay past any date)
            why = self._context.faults.note("its retry policy", job.id, error)
            faulted = machine.outcome(job.state, Faulted(f"{reason}; {why}" if reason else why))
            failed = change_for(job.id, faulted, run.id, exit_code=exit_code, message=message)
            return [] if failed is None else [failed]
        change = transition_for(job, step, ended, run.id)
        return [] if change is None else [change]

    # --- preemption -----------------------------------------------------------------------

    def requeue_preempted(self, run_id: str) -> None:
        """The preempted (or requeued) run stopped: its job is queued again, and the
        preemptors that waited only for it are offered again (``victims.py``)."""
        job_id = self.awaiting_stop.pop(run_id)
        job = self._context.jobdb.read_txn().get(job_id)
        if job is not None:
            view = view_of(job, last_reason=job.reason)
            change = machine.step(view, RunEnded(RunEnd.CANCELLED)).state
            if change is not None and job.state is JobState.PREEMPTED:
                self.transition(job_id, change.state, change.reason)
        self._context.holds.stopped(job_id)

    def stop_requeued(self) -> None:
        """Stop the runs of jobs a user requeued (``flotilla requeue``; the API moved them to
        preempted, as ``RequeueRequested`` steps): each is followed as an evicted run is, and
        its job re-queues once the stop is confirmed — at once when the engine no longer has
        the run. O(preempted jobs)."""
        context = self._context
        for job in context.jobdb.read_txn().jobs_in_state(JobState.PREEMPTED):
            run = job.run
            if run is None or run.id in self.awaiting_stop:
                continue
            with context.faults.contain("its requeue", job.id, run.id):
                self._stop_requeued(job)

    def _stop_requeued(self, job: JobRecord) -> None:
        run = job.run
        assert run is not None
        self.awaiting_stop[run.id] = job.id
        backend = self._context.backends.get(run.cluster)
        if backend is None:
            self.requeue_preempted(run.id)
            return
        try:
            result = backend.cancel(preemption_request(run.id, job.spec, job.reason))
        except BackendUnavailable as error:
            log.log(level_of(error), "requeue of %s waits for %s: %s", job.id, run.cluster, error)
            self.awaiting_stop.pop(run.id, None)  # asked again next pass
            return
        if result.outcome in (CancelOutcome.UNKNOWN_RUN, CancelOutcome.ALREADY_FINISHED):
            self.requeue_preempted(run.id)

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
        self.clusters.adopt()

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
        stop = effects.read(machine.step(view_of(job), CancelRequested())).stop
        if stop is None:
            return
        trace("loop-seen", job.id)
        backend = self._context.backends.get(job.run.cluster)
        if backend is None:
            self._cancelled(job)
            return
        if signalled:
            self._cancelling[job.run.id] = job.run.cluster
            return
        try:
            result = backend.cancel(CancelRequest(job.run.id, reason=stop.reason))
        except BackendUnavailable as error:
            log.log(
                level_of(error), "cancel of %s waits for %s: %s", job.id, job.run.cluster, error
            )
            return  # asked again next pass
        trace("backend-signalled", job.id)
        crash_point("during-cancel")
        if result.outcome is CancelOutcome.UNKNOWN_RUN or (
            result.outcome is CancelOutcome.ALREADY_FINISHED and job.state is JobState.LEASED
        ):
            self._cancelled(job)
            return
        # Followed to its end — also a run already finished: the API's thread may have stopped
        # it before this pass (``cancel_signal.py``), and the next status request records it.
        self._cancelling[job.run.id] = job.run.cluster

    def _cancelled(self, job: JobRecord) -> None:
        """The backend never had the cancelled job's run: it ended, cancelled, now."""
        assert job.run is not None
        ended = RunEnded(RunEnd.CANCELLED, machine.CANCELLED_REASON)
        change = transition_for(job, machine.step(view_of(job), ended), ended, job.run.id)
        if change is not None:
            self.record([change])
            self._writes.flush()

    def expire_gangs(self, gangs: Iterable[JobRecord]) -> None:
        """Queued gangs past their timeout fail, with the last reason they waited for; a
        named gang's queued members fail together (``lifecycle/gangs.py``, ``fails_with``)."""
        now = time.time()
        queued = list(gangs)
        due: dict[str, JobRecord] = {}
        for job in queued:
            with self._context.faults.contain("its gang timeout", job.id):
                gang = job.spec.gang
                if gang is not None and now - self._waiting_since(job) > gang.timeout:
                    due[job.id] = job
        named = {fails_with(job.spec) for job in due.values()} - {None}
        if named:
            due.update((job.id, job) for job in queued if fails_with(job.spec) in named)
        for job in due.values():
            with self._context.faults.contain("its gang timeout", job.id):
                view = view_of(job, last_reason=self._context.reasons.get(job.id))
                change = machine.step(view, TimerFired(TimerKind.GANG_TIMEOUT)).state
                if change is not None:
                    self.transition(job.id, change.state, change.reason)

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

    def fail_unmet_dependencies(self, never: Mapping[str, SetState]) -> None:
        """Queued jobs whose dependency can never be met end (skipped, or failed when it
        could not be read), naming it (one write)."""
        self.record([Transition(job_id, end.state, end.reason) for job_id, end in never.items()])


def preemption_request(run_id: str, spec: JobSpec, reason: str) -> CancelRequest:
    """Stop a preempted (or requeued) run as its job asks (``preemption: {grace, signal}``):
    the signal first, the kill after the grace; the backend's defaults otherwise."""
    asked = spec.preemption
    if asked is None:
        return CancelRequest(run_id, reason=reason)
    return CancelRequest(run_id, reason=reason, grace_period=asked.grace, signal=asked.signal)
