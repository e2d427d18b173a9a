"""Virtual-time simulation of a scenario with the real scheduling engine.

Time advances on the cycle grid (0, ``cycle_interval``, 2×…). Before each cycle, every timer
due by then fires in a fixed order (finishes, starts, cluster failures, submissions,
cancellations). A cycle whose inputs did not change since a cycle that scheduled nothing
would decide nothing, so the clock jumps to the next timer instead: a month of trace runs in
seconds while ``summary.cycles`` still counts every cycle of the grid.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from flotilla.framework.clusters import Cluster, ClusterState
from flotilla.framework.fleet import build_cluster
from flotilla.framework.interfaces import Assignment
from flotilla.framework.preemption import lost_work
from flotilla.framework.quota import QuotaTree
from flotilla.framework.resources import EPSILON, ResourceSpace
from flotilla.framework.snapshot import BacklogView, scheduling_config
from flotilla.lifecycle import gangs, machine
from flotilla.lifecycle.events import (
    CancelRequested,
    HoldRequested,
    ReleaseRequested,
    RunEnded,
    TimerFired,
    TimerKind,
)
from flotilla.lifecycle.preemption import VictimWaits, victims_of
from flotilla.lifecycle.rounds import evictions, placements
from flotilla.lifecycle.runs import RunEnd
from flotilla.model.errors import SpecError
from flotilla.model.scenario import Mode, Scenario, ScenarioJobState
from flotilla.scheduler.algorithm import SchedulingAlgorithm
from flotilla.scheduler.reconcile import reconcile
from flotilla.scheduler.runner import AsyncSchedulingRunner, InlineExecutor
from flotilla.scheduler.types import (
    CycleResult,
    QueueInfo,
    RunningJob,
    ScheduledJob,
    SchedulingConfig,
    SchedulingSnapshot,
)
from flotilla.sim.backlog import Backlog
from flotilla.sim.dependencies import Dependencies
from flotilla.sim.fleet import build_jobs, resource_space
from flotilla.sim.holds import ArraySlots
from flotilla.sim.interpreter import LifecycleInterpreter
from flotilla.sim.live import start_live_runs
from flotilla.sim.state import Event, Moment, SimJob, Timer, set_waiting_reasons

HELD_BY_SCENARIO = "held by the scenario"
"""The reason of a scenario's hold (``hold_at``); the replay asks the service with it."""
RELEASED_BY_SCENARIO = "released by the scenario"


@dataclass(frozen=True)
class SimulationOptions:
    until: float | None = None
    progress: Callable[[float, int, int], None] | None = None
    """Called now and then with (virtual time, jobs terminal, jobs total)."""


class Simulator(LifecycleInterpreter):
    def __init__(self, scenario: Scenario, options: SimulationOptions | None = None) -> None:
        self.scenario = scenario
        self.options = options or SimulationOptions()
        settings = scenario.settings
        self.interval = settings.cycle_interval
        self.space: ResourceSpace = resource_space(scenario)
        self.clusters = [
            build_cluster(spec, order, self.space) for order, spec in enumerate(scenario.clusters)
        ]
        self.cluster_by_name = {cluster.name: cluster for cluster in self.clusters}
        self.startup_delay = {spec.name: spec.startup_delay for spec in scenario.clusters}
        self.queues = [
            QueueInfo(
                name=queue.name,
                weight=queue.weight,
                order=order,
                quota=queue.quota,
                preemption=queue.preemption,
                owners=queue.owners,
            )
            for order, queue in enumerate(scenario.queues)
        ]
        self.quotas = QuotaTree(scenario.quotas, self.space) if scenario.quotas else None
        config = scheduling_config(settings)
        self.algorithm = _build_algorithm(config)
        self.runner: AsyncSchedulingRunner | None = None
        if settings.mode is Mode.ASYNC:
            algorithm = self.algorithm
            self.runner = AsyncSchedulingRunner(
                lambda snapshot, cancel: algorithm.schedule(snapshot, cancel), InlineExecutor()
            )
        self.pending_result = False
        self.jobs = [
            SimJob(spec=spec, job=job)
            for spec, job in build_jobs(scenario, self.space, self.algorithm.caches.shapes)
        ]
        self.job_by_name = {job.name: job for job in self.jobs}
        self._dependencies = Dependencies(self.job_by_name)
        self.events: list[Event] = []
        self.moments: dict[float, Moment] = {}
        self.cycles = 0
        self.end_time = 0.0
        self.end_reason = ""
        self.wall_seconds = 0.0
        self.decisions = 0
        self._timers: list[tuple[float, int, int, str, int]] = []
        self._timer_sequence = 0
        self._queued: dict[str, SimJob] = {}
        self._backlog = Backlog(queue.name for queue in self.queues)
        self._running: dict[str, SimJob] = {}
        self._partial: set[str] = set()
        """Running non-strict gangs with replicas still to place."""
        self._slots = ArraySlots(self.job_by_name)
        self._victim_waits = VictimWaits()
        """Preemptors held until their victims' runs stopped (``lifecycle/preemption.py``)."""
        self._terminal = 0
        self.preemptions = 0
        self._queue_allocated: dict[str, np.ndarray] = {}
        self._running_views: dict[str, RunningJob] = {}
        self._allocated = np.zeros(len(self.space))
        self._allocation_integral = np.zeros(len(self.space))
        self._integral_time = 0.0
        self._capacity = sum(
            (cluster.total_capacity() for cluster in self.clusters), start=np.zeros(len(self.space))
        )

    # --- timers ---------------------------------------------------------------------------

    def _schedule_timer(self, at: float, kind: Timer, subject: str, run: int = 0) -> None:
        self._timer_sequence += 1
        heapq.heappush(self._timers, (at, int(kind), self._timer_sequence, subject, run))

    def _fire_timers(self, now: float) -> bool:
        changed = False
        while self._timers and self._timers[0][0] <= now + EPSILON:
            at, kind, _, subject, run = heapq.heappop(self._timers)
            changed |= self._fire(Timer(kind), at, subject, run)
        return changed

    def _fire(self, kind: Timer, at: float, subject: str, run: int) -> bool:
        if kind is Timer.CLUSTER_FAILURE:
            return self._lose_cluster(at, self.cluster_by_name[subject])
        job = self.job_by_name[subject]
        if kind is Timer.SUBMIT:
            self.events.append(Event(at, job.name, "submitted"))
            self._enqueue(job, at, ScenarioJobState.QUEUED)
            return True
        if kind is Timer.GANG_TIMEOUT:
            return self._gang_timeout(job, at, run)
        if kind is Timer.RETRY:
            if run != job.run:
                return False
            return self._step(job, at, TimerFired(TimerKind.BACKOFF))
        if kind is Timer.CANCEL:
            return self._step(job, at, CancelRequested())
        if kind is Timer.STOPPED:
            return self._stopped(job, at)
        if kind is Timer.HOLD:
            return self._step(job, at, HoldRequested(HELD_BY_SCENARIO))
        if kind is Timer.RELEASE:
            return self._step(job, at, ReleaseRequested(RELEASED_BY_SCENARIO))
        if run != job.run or job.state is not ScenarioJobState.RUNNING:
            return False  # a timer of an earlier attempt
        if kind is Timer.START:
            self._start(job, at)
            return False
        if kind is Timer.PROTECTION_ENDS:  # a new victim: worth a round if anything waits
            return bool(self._queued)
        return self._step(job, at, RunEnded(RunEnd.SUCCEEDED))

    def _start(self, job: SimJob, at: float) -> None:
        assert job.assignment is not None
        job.started_at = at
        if job.first_started_at is None:
            job.first_started_at = at
        self.events.append(
            Event(at, job.name, "started", job.assignment.cluster, job.assignment.nodes)
        )
        if job.spec.duration is not None:
            self._schedule_timer(at + job.spec.duration, Timer.FINISH, job.name, job.run)

    def _release(self, job: SimJob, at: float) -> None:
        self._leave_running(job)
        self._free(job, at)

    def _leave_running(self, job: SimJob) -> None:
        """No longer a running job: not in the snapshot's running set, not a victim."""
        self._running.pop(job.name, None)
        self._running_views.pop(job.name, None)
        self._partial.discard(job.name)

    def _free(self, job: SimJob, at: float) -> None:
        """The run's resources go back to its nodes."""
        assert job.assignment is not None
        cluster = self.cluster_by_name[job.assignment.cluster]
        for placement in job.assignment.placements:
            cluster.nodes.release(placement.row, placement.request, placement.gpus)
        self._account(at, -job.assignment.held(len(self.space)), job.job.queue)

    def _lose_cluster(self, at: float, cluster: Cluster) -> bool:
        cluster.state = ClusterState.UNREACHABLE
        reason = f"cluster {cluster.name} became unreachable"
        lost = [
            j
            for j in self._running.values()
            if j.assignment is not None and j.assignment.cluster == cluster.name
        ]
        for job in lost:
            self._step(job, at, RunEnded(RunEnd.NODE_FAILURE, reason))
        self._capacity = sum(
            (c.total_capacity() for c in self.clusters if c.ready), start=np.zeros(len(self.space))
        )
        return True

    def _account(self, at: float, delta: np.ndarray, queue: str | None = None) -> None:
        self._allocation_integral += self._allocated * (at - self._integral_time)
        self._integral_time = at
        self._allocated = self._allocated + delta
        if queue is not None:
            # Kept incrementally and handed to each round: no summing of running jobs per cycle.
            held = self._queue_allocated.get(queue)
            self._queue_allocated[queue] = delta.copy() if held is None else held + delta

    # --- cycles ---------------------------------------------------------------------------

    def snapshot(self, now: float) -> SchedulingSnapshot:
        """What a scheduling round at ``now`` would see."""
        return self._snapshot(now)

    def _snapshot(self, now: float) -> SchedulingSnapshot:
        return SchedulingSnapshot(
            time=now,
            clusters=self.clusters,
            queues=self.queues,
            queued=self._backlog.queued(),
            running=list(self._running_views.values()),
            quotas=self.quotas,
            backlog=BacklogView(
                by_queue=self._backlog.by_queue(),
                running_by_name=dict(self._running_views),
                allocated=self._queue_allocated,
            ),
        )

    def _cycle(self, now: float) -> bool:
        """Run one cycle; True when it changed anything (so the next cycle must run too)."""
        if self.runner is None:
            result = self.algorithm.schedule(self._snapshot(now))
            self.decisions += result.stats.considered
            return self._apply(result, now) > 0
        # Async (Armada): take the result of the round triggered last cycle, reconcile it
        # against what happened since, commit, then trigger the next round on the state after
        # the commit. The simulator's executor runs inline, so rounds are deterministic.
        applied = 0
        ready = self.runner.take_result()
        if ready is not None:
            self.decisions += ready.stats.considered
            reconciled = reconcile(ready, self)
            applied = self._apply(reconciled.result, now, dropped=reconciled.dropped)
        if self._queued or self._partial:  # a non-strict gang growing needs rounds too
            self.runner.trigger(self._snapshot(now))
        upcoming = self.runner.peek()
        if upcoming is not None and not (upcoming.scheduled or upcoming.preempted):
            # A round that decides nothing only explains the state it saw, which is the current
            # one: apply its reasons now instead of holding it in flight, or the clock would
            # tick forever on a job that can never fit.
            self.runner.take_result()
            self.decisions += upcoming.stats.considered
            self._apply(upcoming, now)
            upcoming = None
        self.pending_result = upcoming is not None
        return applied > 0

    def _apply(
        self, result: CycleResult, now: float, *, dropped: dict[str, str] | None = None
    ) -> int:
        if dropped is not None:
            for name, why in dropped.items():
                job = self.job_by_name[name]
                if job.waiting:
                    job.reason = f"decision from t={result.time:g} dropped: {why}"
        stopping: dict[str, list[str]] = {}
        """Preemptor (a job, or a named gang) → its victims whose runs are still stopping."""
        for evict in evictions(result):
            victim = self.job_by_name[evict.job]
            self._step(victim, now, evict.event)
            if victim.stopping:
                stopping.setdefault(evict.by, []).append(victim.name)
        applied = 0
        for place in placements(result):
            job, decision = self.job_by_name[place.job], place.decision
            gang = decision.job.gang
            victims = victims_of(stopping, job.name, gang.name if gang is not None else None)
            if victims and job.waiting:
                self._wait_for_victims(job, list(victims))
                continue
            if dropped is not None or stopping:  # what the stopping victims hold is no room
                unfit = self.room_for(decision.assignment)
                if unfit is not None:
                    job.reason = f"decision from t={result.time:g} dropped: {unfit}"
                    continue
            self._interpret(job, now, machine.step(self._view(job), place.event), decision)
            applied += 1
        # Per waiting job, every cycle: no dictionary built, no per-job state check.
        set_waiting_reasons(self._queued, result.pending)
        return applied

    def _charge_lost_work(self, job: SimJob, at: float) -> None:
        view = self._running_views.get(job.name)
        if view is not None:
            job.lost_gpu_seconds += lost_work(view, at)

    # --- CurrentState, for reconciliation ---------------------------------------------------

    def waiting(self, job: str) -> bool:
        return self.job_by_name[job].waiting

    def running(self, job: str) -> bool:
        return self.job_by_name[job].state is ScenarioJobState.RUNNING

    def cluster_ready(self, cluster: str) -> bool:
        return bool(self.cluster_by_name[cluster].ready)

    def room_for(self, assignment: Assignment) -> str | None:
        nodes = self.cluster_by_name[assignment.cluster].nodes
        for placement in assignment.placements:
            free = nodes.capacity[placement.row] - nodes.allocated[placement.row]
            if np.any(free < placement.request - EPSILON):
                return f"node {placement.node} no longer has room"
        return None

    def _allocate(self, job: SimJob, assignment: Assignment, now: float) -> None:
        cluster = self.cluster_by_name[assignment.cluster]
        for placement in assignment.placements:
            cluster.nodes.allocate(placement.row, placement.request, placement.gpus)
        self._account(now, assignment.held(len(self.space)), job.job.queue)

    def _grow(self, job: SimJob, decision: ScheduledJob, now: float) -> None:
        """A non-strict gang growing (``GrowRun``): more replicas join the running job."""
        assignment = decision.assignment
        assert job.assignment is not None
        self._allocate(job, assignment, now)
        job.assignment = Assignment(
            job.assignment.cluster, job.assignment.placements + assignment.placements
        )
        previous = self._running_views.get(job.name)
        self._running_views[job.name] = RunningJob(
            job.job,
            job.assignment,
            previous.started_at if previous is not None else now,
            previous.last_checkpoint_at if previous is not None else None,
        )
        self.events.append(
            Event(now, job.name, gangs.GROWTH_EVENT, assignment.cluster, assignment.nodes)
        )
        self._note_partial(job)

    def _run(self, job: SimJob, decision: ScheduledJob, now: float) -> None:
        """A run starts (``StartRun``): the simulator's ``running`` from the decision on."""
        assignment = decision.assignment
        self._allocate(job, assignment, now)
        job.scheduled_at = now
        if self._queued.pop(job.name, None) is not None:
            self._backlog.remove(job.job)
        self._running[job.name] = job
        self._slots.started(job)
        job.state = ScenarioJobState.RUNNING
        self._moved(job)
        job.assignment = assignment
        delay = self.startup_delay[assignment.cluster]
        # Its run starts after the cluster's start-up delay: its protection (``min_runtime``)
        # and the work a preemption would lose count from then, not from this decision.
        self._running_views[job.name] = RunningJob(job.job, assignment, now + delay)
        self._note_partial(job)
        job.reason = None
        job.run += 1
        job.attempts += 1
        if job.job.min_runtime is not None:  # a victim from then on: wake a round
            self._schedule_timer(
                now + delay + job.job.min_runtime, Timer.PROTECTION_ENDS, job.name, job.run
            )
        if job.first_scheduled_at is None:
            job.first_scheduled_at = now
        self.events.append(Event(now, job.name, "scheduled", assignment.cluster, assignment.nodes))
        if delay > 0:
            self._schedule_timer(now + delay, Timer.START, job.name, job.run)
        else:
            self._start(job, now)

    def place(self, job: SimJob, assignment: Assignment, now: float) -> None:
        """Run ``job`` on ``assignment`` outside a round (a live export's running jobs)."""
        self._run(job, ScheduledJob(job.job, assignment), now)

    def backdate(self, job: SimJob, elapsed: float, checkpoint: float | None) -> None:
        """A live export's running job placed at t=0 had already run ``elapsed`` seconds
        (and reported a checkpoint at ``checkpoint``): victim selection sees it started then,
        and a protection (``min_runtime``) still running wakes a round when it ends."""
        assert job.assignment is not None
        started = -elapsed
        self._running_views[job.name] = RunningJob(job.job, job.assignment, started, checkpoint)
        least = job.job.min_runtime
        if least is not None and 0 < started + least < least:
            self._schedule_timer(started + least, Timer.PROTECTION_ENDS, job.name, job.run)

    def _note_partial(self, job: SimJob) -> None:
        assert job.assignment is not None
        if len(job.assignment.placements) < job.job.replica_count:
            self._partial.add(job.name)
        else:
            self._partial.discard(job.name)

    # --- the clock ------------------------------------------------------------------------

    def run(self) -> Simulator:
        started = time.perf_counter()
        for job in self.jobs:
            self._schedule_timer(job.spec.submit_at, Timer.SUBMIT, job.name)
            if job.spec.cancel_at is not None:
                self._schedule_timer(job.spec.cancel_at, Timer.CANCEL, job.name)
            if job.spec.hold_at is not None:
                self._schedule_timer(job.spec.hold_at, Timer.HOLD, job.name)
            if job.spec.release_at is not None:
                self._schedule_timer(job.spec.release_at, Timer.RELEASE, job.name)
        for spec in self.scenario.clusters:
            if spec.fail_at is not None:
                self._schedule_timer(spec.fail_at, Timer.CLUSTER_FAILURE, spec.name)
        if self.scenario.live is not None:
            self._fire_timers(0.0)
            start_live_runs(self)  # a live export's running jobs hold their nodes from t=0
        limits = [x for x in (self.options.until, self.scenario.settings.max_time) if x is not None]
        limit = min(limits) if limits else None
        watch_times = sorted(
            {self.grid_floor(float(e.at)) for e in self.scenario.expect if e.at != "end"}
        )
        terminal_target = len(self.jobs)
        step = 0
        dirty = True
        last_progress = time.perf_counter()
        while True:
            now = step * self.interval
            if limit is not None and now > limit + EPSILON:
                self.end_reason = "--until" if limit == self.options.until else "settings.max_time"
                # The clock may have jumped over idle cycles past the limit: the run still
                # lasted until the cycle at the limit, which would have changed nothing.
                self.end_time = self.grid_floor(limit)
                self.cycles = round(self.end_time / self.interval) + 1
                break
            changed = self._fire_timers(now)
            if changed or dirty or self.pending_result:
                dirty = self._cycle(now)
            self.cycles = step + 1
            self.end_time = now
            if now in watch_times:
                self._capture(now)
            if self._terminal_count() == terminal_target:
                self.end_reason = "every job is terminal"
                break
            if not dirty and not self.pending_result and not self._timers:
                self.end_reason = "nothing can change any more"
                break
            if self.options.progress and time.perf_counter() - last_progress > 0.5:
                last_progress = time.perf_counter()
                self.options.progress(now, self._terminal_count(), terminal_target)
            if dirty or self.pending_result:
                step += 1
                continue
            upcoming = [t for t in watch_times if t > now + EPSILON]
            candidates = [self._timers[0][0]] if self._timers else []
            candidates += upcoming[:1]
            next_time = min(candidates)
            step = max(step + 1, math.ceil(next_time / self.interval - EPSILON))
        self._account(self.end_time, np.zeros(len(self.space)))
        self.wall_seconds = time.perf_counter() - started
        return self

    def grid_floor(self, at: float) -> float:
        return math.floor(at / self.interval + EPSILON) * self.interval

    def _terminal_count(self) -> int:
        return self._terminal

    def _capture(self, now: float) -> None:
        moment = Moment(time=now)
        for job in self.jobs:
            moment.jobs[job.name] = self.job_facts(job)
        for queue in self.queues:
            moment.queues[queue.name] = self.queue_counts(queue.name)
        self.moments[now] = moment

    def job_facts(self, job: SimJob) -> dict[str, object]:
        return {
            "state": job.state.value if job.state else "unsubmitted",
            "cluster": job.assignment.cluster if job.assignment else None,
            "reason": job.reason,
            "preemptions": job.preemptions,
            "placements": len(job.assignment.placements)
            if job.assignment is not None and job.state is ScenarioJobState.RUNNING
            else 0,
        }

    def queue_counts(self, queue: str) -> dict[str, int]:
        running = sum(1 for job in self._running.values() if job.job.queue == queue)
        queued = sum(1 for job in self._queued.values() if job.job.queue == queue)
        return {"running": running, "queued": queued}

    # --- figures for the report -------------------------------------------------------------

    @property
    def capacity(self) -> np.ndarray:
        return self._capacity

    def utilization(self) -> dict[str, float]:
        total = sum((c.total_capacity() for c in self.clusters), start=np.zeros(len(self.space)))
        over_time = self.end_time > 0
        mean = self._allocation_integral / self.end_time if over_time else self._allocated
        return {
            name: round(float(mean[i] / total[i]), 4)
            for i, name in enumerate(self.space.names)
            if total[i] > EPSILON
        }


def _build_algorithm(config: SchedulingConfig) -> SchedulingAlgorithm:
    from flotilla.framework.registry import UnknownExtension

    try:
        return SchedulingAlgorithm(config)
    except UnknownExtension as error:
        field = {
            "assignment strategy": "settings.assignment_strategy",
            "profile": "settings.plugins.profile",
        }.get(error.kind, "settings.plugins")
        raise SpecError([f"{field}: {error}"]) from None


def simulate(scenario: Scenario, options: SimulationOptions | None = None) -> Simulator:
    return Simulator(scenario, options).run()
