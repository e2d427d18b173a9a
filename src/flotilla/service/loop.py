"""The service's scheduling loop: every cycle sync, apply transitions, and — when leader —
schedule, commit and dispatch.

One cycle:

1. **Sync.** The JobDb catches up with the store by serial (``jobs_since``); the records it
   applied feed the snapshot builder, which keeps the queued backlog's engine jobs.
2. **Lead** (``leadership.py``). Take the scheduling lease (a thread of its own renews it,
   so a round longer than its TTL keeps it). Only the holder writes: every write it makes is
   fenced by the lease, so a replica that lost it cannot commit anything, and it stops
   scheduling at once (an async round in flight is reset).
3. **Transitions** (``transitions.py``, leader). Heartbeats and run states from each
   cluster's backend become job transitions (running, succeeded, failed, lost → re-queued);
   clusters that stopped reporting become unreachable and their runs are re-queued; cancel
   requests stop runs; gangs past their timeout fail; leased runs not yet dispatched (a crash
   in between) are dispatched again (``dispatch.py``) — dispatch is idempotent by run id.
4. **Schedule** (leader). ``mode: sync`` runs the algorithm inline on a snapshot
   (``snapshots.py``). ``mode: async`` takes the result of the round triggered earlier,
   reconciles it against the current state, commits it, and only then triggers the next round
   (Armada).
5. **Commit and dispatch** (``commit.py``). Evictions stop their runs (the job is re-queued
   when the backend confirms the stop); leases are recorded in one transaction; each new run
   is dispatched.

Between full cycles, while an async round is in flight or a cancelled run has not ended yet, a
cheap transitions pass (poll the backends, apply cancel requests) runs every few
milliseconds; a wake from the API (a cancel, a submission) runs one at once. No step of a
cycle walks the whole backlog, so a cancel never waits long behind one.

Jobs are identified in the engine by their store id.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from flotilla.backends.interface import (
    Backend,
    BackendUnavailable,
    LogChunk,
    LogsRequest,
    RunStatus,
    StatusRequest,
    UnknownRun,
)
from flotilla.framework.snapshot import CycleResult, SchedulingConfig, SchedulingSnapshot
from flotilla.model import ClusterSpec
from flotilla.model.node_info import NodeInfo
from flotilla.model.scenario import Mode
from flotilla.scheduler.algorithm import SchedulingAlgorithm
from flotilla.scheduler.precedence import Precedence
from flotilla.scheduler.reconcile import reconcile
from flotilla.scheduler.runner import AsyncSchedulingRunner, RunnerState, ThreadExecutor
from flotilla.secrets import SecretBox
from flotilla.service.allocator import AllocatorTrim, glibc_malloc_trim
from flotilla.service.cancel_signal import stop_runs_at_once
from flotilla.service.cluster_watch import ClusterSpecBuilder, spec_from_record
from flotilla.service.commit import Committer
from flotilla.service.context import LoopContext
from flotilla.service.dispatch import Dispatcher
from flotilla.service.engines import patient_status
from flotilla.service.fleet import FleetRuntime, scheduling_config
from flotilla.service.forked import ForkedRound
from flotilla.service.handle import CycleReport
from flotilla.service.leadership import Leadership
from flotilla.service.metrics import SchedulerMetrics
from flotilla.service.reporting import Reporter
from flotilla.service.retention import DEFAULT_RETENTION_SECONDS, FinishedJobs
from flotilla.service.snapshots import CurrentState, SnapshotBuilder
from flotilla.service.transitions import RunTransitions
from flotilla.service.writes import CycleWrites
from flotilla.stage_trace import trace
from flotilla.store import ClusterRecord, JobRecord, JobState, Lease, LeaseLostError, Store

log = logging.getLogger(__name__)

TRANSITION_SECONDS = 0.05
"""How often the loop applies transitions between full cycles while an async round is in
flight (and so the floor of how fast a run's end is recorded)."""

DEFER_WRITES_SECONDS = 1.0
"""The longest cycle interval for which a cycle's dispatch outcomes wait to be written with the
next cycle's leases (``writes.py``). Beyond it they are written at the cycle's end: with
cycles 30 s apart a job that started would otherwise read ``leased`` for 30 s."""

CANCEL_POLL_SECONDS = 0.005
"""How often the loop polls the backends while a cancelled run has not been seen to end: the
cancel's effect is recorded within this of the process exiting."""

SWITCH_SECONDS = 0.0005
"""The interpreter's thread switch interval while the loop runs, in every mode. A round (on a
thread in async mode, inline in sync mode), a submission being validated or a sync being
parsed is pure Python and holds the GIL; with the default 5 ms every time the loop or the API
comes back from I/O (a SQL round trip, a signal) it waits up to 5 ms for the GIL, and a cancel's
path or a GET has dozens of such returns. The extra switches cost little
(``docs/performance.md``)."""

PREPARE_SECONDS = 0.005
"""How long one transitions pass may spend converting newly queued jobs to engine jobs, so
the snapshot for the next round is ready when it is triggered."""


FAILED_CYCLE_MAX_BACKOFF = 30.0
"""The longest wait after failed cycles before the next try (the wait doubles from one cycle
interval with each failure in a row): a cycle that keeps failing must not spin."""


def failed_cycle_backoff(interval: float, failures: int) -> float:
    """The wait before the next cycle after ``failures`` failed cycles in a row."""
    first = max(interval, 0.01)
    return float(min(FAILED_CYCLE_MAX_BACKOFF, first * 2 ** min(failures - 1, 32)))


def _with_fleet_settings(settings: LoopSettings, fleet: FleetRuntime) -> LoopSettings:
    if fleet.fleet is None:
        return settings
    given = fleet.fleet.settings
    return replace(
        settings,
        scheduling=scheduling_config(given),
        mode=given.mode,
        cycle_interval=given.cycle_interval,
        heartbeat_timeout=given.heartbeat_timeout or settings.heartbeat_timeout,
    )


def _fleet_spec(fleet: FleetRuntime) -> ClusterSpecBuilder:
    def build(record: ClusterRecord, nodes: Sequence[NodeInfo]) -> ClusterSpec:
        if fleet.fleet is None:
            return spec_from_record(record, nodes)
        return fleet.cluster_spec(record.name, nodes)

    return build


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
    algorithm_process: bool = False
    """Async mode: run each scheduling round in a forked child process (``forked.py``), so that
    it cannot hold the GIL against the API and the loop; default: on a thread of this process,
    which gave cancels as fast or faster on a loaded machine (docs/architecture.md)."""
    finished_retention: float = DEFAULT_RETENTION_SECONDS
    """Seconds a finished job stays in the JobDb after it ended (the store keeps it)."""


class SchedulingLoop:
    """Drives the engine against the store and the backends. Implements ``SchedulerHandle``."""

    def __init__(
        self,
        store: Store,
        backends: Mapping[str, Backend],
        settings: LoopSettings | None = None,
        metrics: SchedulerMetrics | None = None,
        fleet: FleetRuntime | None = None,
        secrets: SecretBox | None = None,
    ) -> None:
        """With ``fleet``, the backends are the fleet's (one dict, changed in place when an
        apply changes the fleet) and its settings override ``settings.scheduling``,
        ``mode`` and ``cycle_interval``."""
        self.store = store
        self.fleet = fleet
        self.backends = fleet.backends if fleet is not None else dict(backends)
        self.settings = settings or LoopSettings()
        if fleet is not None and fleet.fleet is not None:
            self.settings = _with_fleet_settings(self.settings, fleet)
        self.metrics = metrics or SchedulerMetrics()
        self.precedence = Precedence()
        """Urgent work of this process (the API's requests, the passes that apply cancels and
        follow runs) that a scheduling round on a thread of it yields to."""
        self._finished = FinishedJobs(self.settings.finished_retention)
        self._allocator = AllocatorTrim(glibc_malloc_trim())
        self.jobdb = self._finished.load(store)
        self.algorithm = SchedulingAlgorithm(self.settings.scheduling)
        self._seed_usage()
        self.runner: AsyncSchedulingRunner | None = None
        if self.settings.mode is Mode.ASYNC:
            self.runner = self._async_runner()
        self._context = LoopContext(
            store,
            self.backends,
            self.jobdb,
            self.metrics,
            secrets=secrets,
            pace=self.precedence.pace,
        )
        self._leadership = Leadership(
            self._context, self.settings.lease_name, self.settings.replica, self.settings.lease_ttl
        )
        self._writes = CycleWrites(self._context, self._absorb)
        self._writes.resume = self._leadership.resume
        self._transitions = RunTransitions(
            self._context,
            self._writes,
            self.settings.heartbeat_timeout,
            **({"cluster_spec": _fleet_spec(fleet)} if fleet is not None else {}),
        )
        self._dispatcher = Dispatcher(self._context, self._transitions, self._sync)
        self._committer = Committer(
            self._context, self._transitions, self._dispatcher, self._writes
        )
        self._snapshots = SnapshotBuilder(
            store,
            self.jobdb,
            pace=self.precedence.pace,
            faults=self._context.faults,
            holds=self._context.holds,
        )
        if fleet is not None:
            self._snapshots.cluster_order = fleet.cluster_names
        self._reporter = Reporter(self._context)
        self._report = CycleReport()
        self._wake = threading.Event()
        self._cancelled: deque[JobRecord] = deque()
        """Jobs whose cancel the API in this process just committed (``cancelled``): the next
        pass stops their runs before it reads the change feed (on PostgreSQL under load that
        read was a cancel's largest step but one, ``docs/performance.md``)."""
        self._stopped_at_once: set[str] = set()
        """Runs the API's threads stopped already (``cancel_signal.py``): the loop only
        follows them. Added to by those threads, taken by the loop's (both atomic)."""
        self._cycles = 0
        self._last_pass = float("-inf")
        self._draining = False

    def _seed_usage(self) -> None:
        """With ``usage_half_life``, start the engine's decayed usage from run history in the
        store, so that a restart (or a fleet apply that changes the half-life) forgets nothing."""
        ledger = self.algorithm.usage
        if ledger is not None:
            now, by_queue = self.store.decayed_usage(ledger.half_life)
            self.algorithm.seed_usage(now.timestamp(), by_queue)

    def _async_runner(self) -> AsyncSchedulingRunner:
        """The runner of async mode: each round in a child process (``forked.py``), or on a
        thread of this one with ``algorithm_process=False``."""

        def schedule(snapshot: SchedulingSnapshot, cancel: threading.Event) -> CycleResult:
            return self.algorithm.schedule(snapshot, cancel, self.precedence)

        def schedule_forked(snapshot: SchedulingSnapshot, cancel: threading.Event) -> CycleResult:
            return self.algorithm.schedule(snapshot, cancel)  # nothing to yield to in the child

        forked = ForkedRound(schedule_forked)

        def schedule_in_child(snapshot: SchedulingSnapshot, cancel: threading.Event) -> CycleResult:
            # The decayed-usage ledger lives in this process: advance it before the fork. What
            # the child's round starts is held from the next observation (a cycle later).
            return forked(self.algorithm.observe_usage(snapshot), cancel)

        return AsyncSchedulingRunner(
            schedule_in_child if self.settings.algorithm_process else schedule,
            ThreadExecutor(),
            on_duration=self.metrics.algorithm_seconds.observe,
        )

    # --- SchedulerHandle ------------------------------------------------------------------

    @property
    def lease(self) -> Lease | None:
        """The scheduling lease while this replica leads."""
        return self._context.lease

    @property
    def is_leader(self) -> bool:
        return self._context.lease is not None

    def pending_reason(self, job_id: str) -> str | None:
        return self._context.reasons.get(job_id)

    def last_cycle(self) -> CycleReport:
        return self._report

    def logs(self, job_id: str, request: LogsRequest) -> LogChunk:
        job = self.store.get_job(job_id)
        if job.run is None:
            raise UnknownRun(f"job {job_id} has not run yet")
        run = job.run
        if request.run_id != run.id:  # an earlier attempt, if it is one of this job's runs
            run = next((old for old in self.store.runs(job_id) if old.id == request.run_id), run)
        backend = self.backends.get(run.cluster)
        if backend is None:
            raise UnknownRun(f"cluster {run.cluster} has no backend in this replica")
        return backend.logs(replace(request, run_id=run.id))

    def run_status(self, job_id: str, run_id: str) -> RunStatus:
        run = next((run for run in self.store.runs(job_id) if run.id == run_id), None)
        if run is None:
            raise UnknownRun(f"job {job_id} has no run {run_id}")
        backend = self.backends.get(run.cluster)
        if backend is None:
            raise UnknownRun(f"cluster {run.cluster} has no backend in this replica")
        return patient_status(backend, StatusRequest(run.id))  # a person waits for it

    def wake(self) -> None:
        self._wake.set()

    def cancelled(self, jobs: Sequence[JobRecord]) -> None:
        stopping = [job for job in jobs if job.cancel_requested and job.run is not None]
        self._dispatcher.note_cancelled(job.id for job in stopping)  # before any backend call
        if self._context.lease is not None:  # only the leader's backends stop runs
            self._stopped_at_once.update(stop_runs_at_once(self.backends, stopping))
        self._cancelled.extend(stopping)
        self._wake.set()

    def _take_cancelled(self) -> list[JobRecord]:
        """The jobs handed over by ``cancelled`` since the last call (the API's threads add
        while the loop takes: a deque's ``popleft`` is atomic)."""
        taken: list[JobRecord] = []
        while self._cancelled:
            taken.append(self._cancelled.popleft())
        return taken

    def drain(self) -> None:
        """Start no new job from now on; running ones are still followed to their end
        (``flotilla up --drain``). Leases already recorded are still dispatched."""
        self._draining = True
        self._wake.set()

    # --- running --------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Cycle until ``stop`` is set; a failed cycle is logged and retried after a backoff
        (``failed_cycle_backoff``: doubling from one interval, at most 30 s), not at once.

        A wake from the API (a submission, a cancel) runs a transitions pass at once, then a
        full cycle unless an async round is in flight (a full cycle then has nothing to
        schedule). Between full cycles, transitions passes run every ``TRANSITION_SECONDS``
        while a round is in flight, and every ``CANCEL_POLL_SECONDS`` while a cancelled run
        has not ended, so cancels take effect during a long round, not a cycle later."""
        next_cycle = 0.0
        failures = 0
        retry_at = 0.0  # a failed cycle's backoff: not even a wake retries sooner
        sys.setswitchinterval(SWITCH_SECONDS)
        # Renewal on a thread of its own: a round longer than the TTL (inline in sync mode)
        # must not cost the lease (``leadership.py``).
        self._leadership.start_renewing(on_lost=self._wake.set)
        try:
            while not stop.is_set():
                try:
                    if time.monotonic() >= next_cycle:
                        self.cycle()
                        failures = 0
                        next_cycle = time.monotonic() + self.settings.cycle_interval
                    else:
                        if self._between_cycles() is not None:
                            self._between_pass()
                        if self._leadership.renew_between_cycles():
                            self._lose_lease()
                            next_cycle = time.monotonic()  # try to take it back now
                except Exception as error:
                    failures += 1
                    delay = failed_cycle_backoff(self.settings.cycle_interval, failures)
                    next_cycle = retry_at = time.monotonic() + delay
                    if isinstance(error, BackendUnavailable):  # expected: one line
                        log.warning("scheduling cycle failed, retrying in %.3g s: %s", delay, error)
                    else:
                        log.exception("scheduling cycle failed; retrying in %.3g s", delay)
                wait = max(0.0, next_cycle - time.monotonic())
                for interval in (self._between_cycles(), self._leadership.renewal_due_in()):
                    if interval is not None:
                        wait = min(wait, interval)
                if self._wake.wait(wait):
                    self._wake.clear()
                    trace("loop-woken")
                    if self._round_in_flight():
                        try:
                            self.transitions()  # a cancel: stop its run now
                        except Exception:
                            log.exception("transitions pass failed; retrying")
                    else:  # a submission or a cancel: cycle now (after a failure's backoff)
                        next_cycle = max(time.monotonic(), retry_at)
        finally:
            self.close()

    def _between_cycles(self) -> float | None:
        """How often to run transitions passes between full cycles; None: not at all."""
        if self._context.lease is None:
            return None
        if self._transitions.cancelling:
            return CANCEL_POLL_SECONDS
        if self._round_in_flight():
            return TRANSITION_SECONDS
        return None

    def _between_pass(self) -> None:
        """A transitions pass, or — while waiting for cancelled runs to end, and a full pass
        ran less than ``TRANSITION_SECONDS`` ago — only a status request for each run being
        cancelled: no SQL unless one ended, and no work for the other active runs, so it can
        run every few milliseconds."""
        if time.monotonic() - self._last_pass >= TRANSITION_SECONDS:
            self.transitions()
            return
        try:
            with self.precedence.urgent():
                self._transitions.poll_cancelling()
        except LeaseLostError:
            log.warning("lost the scheduling lease; stopping at once")
            self._lose_lease()

    def _round_in_flight(self) -> bool:
        return self.runner is not None and self.runner.state in (
            RunnerState.RUN_REQUESTED,
            RunnerState.RUNNING,
        )

    def transitions(self) -> None:
        """Apply what happened since the last pass — run states from the backends, cancel
        requests — without scheduling. Cheap: no snapshot, no heartbeat writes. Spare time
        converts newly queued jobs for the next snapshot."""
        if self._context.lease is None:
            return
        self._last_pass = time.monotonic()
        try:
            with self.precedence.urgent():  # a cancel waits on it; a round in flight yields
                if self._transitions.stop_for_cancels(
                    self._take_cancelled(), self._stopped_at_once
                ):
                    # A run was just signalled for a cancel: the loop's status requests follow
                    # it from now on; the feed read, the poll and the flush (round trips that
                    # on a loaded PostgreSQL held the run's end back by tens of milliseconds)
                    # wait for the next full pass, within TRANSITION_SECONDS.
                    return
                self._sync()
                self._transitions.apply_cancel_requests()  # first: a wake is most often a cancel
                self._transitions.stop_requeued()
                self._transitions.poll_all()
                self._writes.flush()
            if not self._transitions.cancelling:
                self._snapshots.prepare(PREPARE_SECONDS)
        except LeaseLostError:
            log.warning("lost the scheduling lease; stopping at once")
            self._lose_lease()

    def close(self) -> None:
        self._leadership.stop_renewing()
        if self.runner is not None:
            self.runner.reset()
        if self._context.lease is not None and self._writes.waiting:
            try:
                self._writes.flush()  # the last dispatch outcomes, before the lease goes
            except Exception:
                log.exception("could not record the last transitions; the next term recovers")
        self._leadership.release()

    def reload_fleet(self) -> bool:
        """Take up a fleet applied since the last cycle (any replica: the backends serve
        logs everywhere); the engine's settings change between two scheduling rounds."""
        if self.fleet is None or not self.fleet.sync():
            return False
        settings = _with_fleet_settings(self.settings, self.fleet)
        if settings.scheduling != self.settings.scheduling or settings.mode != self.settings.mode:
            previous, self.algorithm = self.algorithm, SchedulingAlgorithm(settings.scheduling)
            self.algorithm.adopt_usage(previous)
            if self.algorithm.usage is not previous.usage:
                self._seed_usage()
            if self.runner is not None:
                self.runner.reset()
            self.runner = None
            if settings.mode is Mode.ASYNC:
                self.runner = self._async_runner()
        self.settings = settings
        self._transitions.clusters.heartbeat_timeout = settings.heartbeat_timeout
        log.info("fleet version %d in force", self.fleet.version)
        return True

    def cycle(self) -> CycleReport:
        started = time.perf_counter()
        self._cycles += 1
        try:
            self.reload_fleet()
        except Exception:  # a bad reload must not stop scheduling with the fleet in force
            log.exception("reloading the fleet failed; keeping the one in force")
        self._sync()
        was_leader = self._context.lease is not None
        if self._leadership.hold():
            self._start_leading()
        elif was_leader and self._context.lease is None:
            self._lose_lease()  # not renewed: never commit what the old term computed
        result: CycleResult | None = None
        if self._context.lease is not None:
            try:
                # One write per cycle as a rule (``writes.py``): what the backends report
                # waits for the cycle's leases, unless it changes what the scheduler sees.
                written = self._writes.flushes
                self._transitions.stop_for_cancels(self._take_cancelled(), self._stopped_at_once)
                self._transitions.observe_clusters()
                self._transitions.apply_cancel_requests()
                self._transitions.stop_requeued()
                self._transitions.expire_gangs(list(self._snapshots.gangs.values()))
                self._transitions.fail_unmet_dependencies(self._snapshots.dependencies.never)
                if self._writes.settling:
                    self._writes.flush()
                self._dispatcher.dispatch_leased()
                result = None if self._draining else self._schedule()
                if self._writes.flushes == written or (
                    self._writes.waiting and self.settings.cycle_interval > DEFER_WRITES_SECONDS
                ):
                    self._writes.flush()  # no leases, or the next cycle is far: it goes now
            except LeaseLostError:
                log.warning("lost the scheduling lease during a cycle; stopping at once")
                self._lose_lease()
        self._allocator.note_dropped(self._finished.sweep())
        if not self._transitions.cancelling:  # a trim takes milliseconds: not on a cancel's path
            self._allocator.trim_if_due()
        seconds = time.perf_counter() - started
        self.metrics.cycle_seconds.observe(seconds)
        self._report = self._reporter.report(
            number=self._cycles,
            seconds=seconds,
            result=result,
            runner_state=self.runner.state.value if self.runner else None,
        )
        return self._report

    def _sync(self) -> None:
        """Catch the JobDb up with the store and feed what changed to the snapshot builder."""
        self._writes.sync()

    def _absorb(self, since: int, records: list[JobRecord]) -> None:
        """Apply the change feed after ``since`` (read by a sync or a write) to the JobDb,
        and what it changed to the snapshot builder and the finished jobs' retention."""
        changed = self.jobdb.apply_feed(since, records, keep=self._finished.keep)
        if changed:
            self._snapshots.observe(changed, self.jobdb.serial)
            self._finished.observe(changed)

    # --- leadership -----------------------------------------------------------------------

    def _start_leading(self) -> None:
        """A new term: forget the old one's in-flight state and recover from the store."""
        if self.runner is not None:
            self.runner.reset()
        self._writes.forget()
        self._transitions.forget()
        self._dispatcher.forget()
        self._transitions.recover()

    def _lose_lease(self) -> None:
        self._writes.forget()
        self._leadership.lose()
        if self.runner is not None:
            self.runner.reset()

    # --- scheduling -----------------------------------------------------------------------

    def _schedule(self) -> CycleResult | None:
        if self.runner is None:
            state = self._snapshots.build(self.jobdb.read_txn())
            result = self.algorithm.schedule(state.snapshot, precedence=self.precedence)
            self.metrics.algorithm_seconds.observe(result.stats.seconds)
            self._committer.commit(result, state)
            return result
        ready = self.runner.take_result()
        committed: CycleResult | None = None
        if ready is not None:
            # Reconciling needs node state only, not the backlog.
            state = self._snapshots.build(self.jobdb.read_txn(), include_queued=False)
            reconciled = reconcile(ready, CurrentState(self.jobdb, state))
            self._committer.commit(reconciled.result, state, dropped=reconciled.dropped)
            committed = reconciled.result
        if self.runner.state is RunnerState.IDLE:
            self._sync()
            read = self.jobdb.read_txn()
            # A non-strict gang with replicas still to place needs rounds too (growth.py).
            if read.count(JobState.QUEUED) or self._committer.growth.incomplete:
                self.runner.trigger(self._snapshots.build(read).snapshot)
            elif self.algorithm.usage is not None:
                # No round: charge the decayed usage anyway, so that a run ending while
                # nothing waits is not charged until the next submission.
                self.algorithm.observe_usage(
                    self._snapshots.build(read, include_queued=False).snapshot
                )
        return committed
