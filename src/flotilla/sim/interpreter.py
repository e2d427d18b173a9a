"""The simulator as an interpreter of the lifecycle core: each event that happens to a job
in virtual time (a submission, a decision, a run's end, a cancel, a timer) is stepped through
``machine.step`` and its effects applied to the simulated backlog, clusters and clock.

A run stops at once in virtual time, and the simulator's ``running`` stands for the service's
leased, pending and running alike (the scenario spec's states). The rules — retries and
their backoff, dependency conditions, array slots, gang timeouts, and their words — are the
core's; here only their bookkeeping.
"""

from __future__ import annotations

from typing import assert_never

from flotilla.lifecycle import machine
from flotilla.lifecycle.dependencies import Verdict
from flotilla.lifecycle.effects import (
    FreeArraySlot,
    GrowRun,
    HoldUntil,
    Offer,
    ReleaseDependents,
    SetState,
    StartRun,
    StopRun,
    WaitForDependencies,
)
from flotilla.lifecycle.events import (
    CancelRequested,
    DependencyEnded,
    RunEnded,
    Submitted,
    TimerFired,
    TimerKind,
)
from flotilla.lifecycle.events import (
    Event as LifecycleEvent,
)
from flotilla.lifecycle.gangs import fails_with
from flotilla.lifecycle.machine import Transition
from flotilla.lifecycle.preemption import VictimWaits, grace_of
from flotilla.lifecycle.runs import RunEnd
from flotilla.lifecycle.states import TERMINAL_JOB_STATES, JobState
from flotilla.lifecycle.view import JobView
from flotilla.model.scenario import ScenarioJobState
from flotilla.scheduler.types import ScheduledJob
from flotilla.sim.backlog import Backlog
from flotilla.sim.dependencies import Dependencies
from flotilla.sim.holds import ArraySlots
from flotilla.sim.state import Event, SimJob, Timer


class LifecycleInterpreter:
    """The lifecycle half of ``Simulator`` (which provides the state declared here)."""

    job_by_name: dict[str, SimJob]
    events: list[Event]
    preemptions: int
    _dependencies: Dependencies
    _slots: ArraySlots
    _queued: dict[str, SimJob]
    _backlog: Backlog
    _terminal: int
    _victim_waits: VictimWaits

    def _schedule_timer(self, at: float, kind: Timer, subject: str, run: int = 0) -> None:
        raise NotImplementedError

    def _release(self, job: SimJob, at: float) -> None:
        raise NotImplementedError

    def _leave_running(self, job: SimJob) -> None:
        raise NotImplementedError

    def _free(self, job: SimJob, at: float) -> None:
        raise NotImplementedError

    def _run(self, job: SimJob, decision: ScheduledJob, now: float) -> None:
        raise NotImplementedError

    def _grow(self, job: SimJob, decision: ScheduledJob, now: float) -> None:
        raise NotImplementedError

    def _charge_lost_work(self, job: SimJob, at: float) -> None:
        """A running job is preempted: count the work since its last checkpoint as lost."""

    def _view(self, job: SimJob, *, cancel: bool = False, dependencies: bool = False) -> JobView:
        """What the lifecycle core needs of ``job``: the simulator's ``running`` stands for
        the service's leased, pending and running alike."""
        assignment = job.assignment
        return JobView(
            spec=job.spec,
            state=None if job.state is None else JobState(job.state.value),
            attempt=job.attempts,
            failures=job.failures,
            cancel_requested=cancel,
            placed=len(assignment.placements) if assignment is not None else 0,
            cluster=assignment.cluster if assignment is not None else None,
            dependencies=self._dependencies.views(job) if dependencies else (),
            last_reason=job.reason,
        )

    def _step(self, job: SimJob, at: float, event: LifecycleEvent) -> bool:
        """Step ``job`` through ``event`` and apply the core's effects; True if any."""
        view = self._view(
            job,
            cancel=isinstance(event, CancelRequested),
            dependencies=isinstance(event, (Submitted, DependencyEnded)),
        )
        return self._interpret(job, at, machine.step(view, event))

    def _interpret(
        self, job: SimJob, at: float, step: Transition, decision: ScheduledJob | None = None
    ) -> bool:
        """Apply the effects of ``step`` (the lifecycle core's answer about ``job``) at
        ``at``; ``decision``: the round's placement a ``StartRun`` or ``GrowRun`` takes. A run
        stops at once in virtual time: a ``StopRun`` that nothing else follows ends the run
        cancelled, as the backend would report it. Every effect type is applied here: a new
        one fails type-checking (``assert_never``) until it is."""
        stop: StopRun | None = None
        back: SetState | None = None
        hold: HoldUntil | None = None
        for effect in step.effects:
            match effect:
                case SetState(state=state):
                    job.failures += effect.counted
                    if state in TERMINAL_JOB_STATES:
                        self._end(job, at, state, effect.reason)
                    elif state is JobState.HELD:
                        self._hold(job, at, effect.reason)
                    elif job.state is ScenarioJobState.HELD:
                        self._unhold(job, at, effect.reason)
                    else:
                        back = effect
                        self._back_to_waiting(job, at, effect)
                case Offer():
                    self._offer(job, at)
                case WaitForDependencies(reason=reason):
                    self._dependencies.hold(job)
                    job.reason = reason
                case StartRun():
                    assert decision is not None
                    self._run(job, decision, at)
                case GrowRun():
                    assert decision is not None
                    self._grow(job, decision, at)
                case StopRun():
                    stop = effect
                case HoldUntil():
                    hold = effect
                case FreeArraySlot():
                    for following in self._slots.release(job):
                        self._enqueue(following, at, ScenarioJobState.QUEUED)
                case ReleaseDependents():
                    for waiter in self._dependencies.ended(job.name):
                        self._step(waiter, at, DependencyEnded(job.name))
                case _:
                    assert_never(effect)
        if back is not None:
            self._wait_again(job, at, back, hold)
        elif stop is not None and job.state is ScenarioJobState.RUNNING:
            ended = RunEnded(RunEnd.CANCELLED, stop.reason)
            self._interpret(job, at, machine.step(self._view(job, cancel=True), ended))
        return bool(step)

    def _enqueue(self, job: SimJob, at: float, state: ScenarioJobState) -> None:
        """The job waits (again): queued, or preempted until it is rescheduled."""
        job.state = state
        job.assignment = None
        self._queued[job.name] = job
        self._admit(job, at)
        self._moved(job)

    def _admit(self, job: SimJob, at: float) -> None:
        """Into the backlog, unless the lifecycle core holds it for its dependencies (or
        fails it) or its array has no slot for it."""
        if job.spec.depends_on:
            self._step(job, at, Submitted())
        else:
            self._offer(job, at)

    def _offer(self, job: SimJob, at: float) -> None:
        self._dependencies.release(job)
        held = self._slots.take(job)
        job.held = held is not None
        if held is not None:
            job.reason = held
            return
        self._backlog.add(job.job)
        gang = job.spec.gang
        if gang is not None:
            self._schedule_timer(at + gang.timeout, Timer.GANG_TIMEOUT, job.name, job.run)

    def _moved(self, job: SimJob) -> None:
        """``job`` changed state without ending: the jobs waiting for it say its new state in
        their reason, as the service's do (``waits for job prep to succeed (it is running)``)."""
        for waiter in self._dependencies.held_waiters(job):
            verdict, reason = machine.dependency_reason(self._dependencies.views(waiter))
            if verdict is Verdict.WAITING:
                waiter.reason = reason

    def _gang_timeout(self, job: SimJob, at: float, run: int) -> bool:
        if run != job.run or not job.waiting:
            return False
        gang = job.spec.gang
        assert gang is not None
        members = [job]
        named = fails_with(job.spec)
        if named is not None:
            members = [other for other in self._queued.values() if fails_with(other.spec) == named]
        for member in members:
            self._step(member, at, TimerFired(TimerKind.GANG_TIMEOUT))
        return True

    def _end(self, job: SimJob, at: float, state: JobState, reason: str) -> None:
        """The job ended (``SetState`` to a terminal state). The report gives a reason for a
        job that failed or was skipped; one that succeeded or was cancelled has none (the
        scenario spec)."""
        if job.state is ScenarioJobState.RUNNING:
            self._release(job, at)
        # A preempted run still stopping frees its resources when its grace is over.
        self._victim_waits.forget(job.name)
        job.run += 1
        if self._queued.pop(job.name, None) is not None and not job.held:
            self._backlog.remove(job.job)
        job.held = False
        job.state = ScenarioJobState(state.value)
        self._terminal += 1
        job.finished_at = at
        job.reason = reason if state in (JobState.FAILED, JobState.SKIPPED) else None
        self._dependencies.release(job)
        self.events.append(Event(at, job.name, state.value, reason=job.reason))

    def _back_to_waiting(self, job: SimJob, at: float, change: SetState) -> None:
        """The job's run ended and it waits again (preempted, or re-queued by its retry
        policy or a lost node): its resources are freed."""
        if job.state is ScenarioJobState.RUNNING:
            grace = grace_of(job.spec) if change.state is JobState.PREEMPTED else 0.0
            if change.state is JobState.PREEMPTED:
                self._charge_lost_work(job, at)
            if grace > 0:  # it stops at the end of its grace, holding its resources till then
                self._leave_running(job)
                job.stopping = True
                self._schedule_timer(at + grace, Timer.STOPPED, job.name)
            else:
                self._release(job, at)
            job.run += 1
        if change.state is JobState.PREEMPTED:
            job.preemptions += 1
            self.preemptions += 1

    def _wait_again(self, job: SimJob, at: float, change: SetState, hold: HoldUntil | None) -> None:
        """After its array slot went to the elements held first: queued again at once, or
        held out of the backlog until its backoff ends."""
        state = ScenarioJobState(change.state.value)
        why = (
            change.reason if hold is None else hold.note(change.reason, f"t={at + hold.seconds:g}")
        )
        if job.stopping:
            job.state = state  # waits for its run to stop before it is queued again
        elif hold is not None:
            job.state, job.assignment = state, None
            job.held, self._queued[job.name] = True, job
            self._schedule_timer(at + hold.seconds, Timer.RETRY, job.name, job.run)
        else:
            self._enqueue(job, at, state)
        job.reason = why
        event = "preempted" if state is ScenarioJobState.PREEMPTED else "requeued"
        self.events.append(Event(at, job.name, event, reason=why))

    def _stopped(self, job: SimJob, at: float) -> bool:
        """A preempted run's grace is over: its resources are free, the job waits to be
        rescheduled (unless it ended meanwhile), and preemptors that waited only for it are
        offered again."""
        if not job.stopping:
            return False
        job.stopping = False
        self._free(job, at)
        self.events.append(Event(at, job.name, "stopped", reason=job.reason))
        if job.state is ScenarioJobState.PREEMPTED:
            reason = job.reason
            self._enqueue(job, at, ScenarioJobState.PREEMPTED)
            job.reason = job.reason if job.held else reason
        for name in self._victim_waits.stopped(job.name):
            preemptor = self.job_by_name[name]
            if preemptor.waiting and preemptor.held and name in self._queued:
                preemptor.held = False
                self._backlog.add(preemptor.job)
        return True

    def _wait_for_victims(self, job: SimJob, victims: list[str]) -> None:
        """The round placed ``job`` by preempting ``victims`` whose runs are still stopping:
        it waits out of the backlog until they stopped (``lifecycle/preemption.py``)."""
        job.reason = self._victim_waits.wait(job.name, {v: f"job {v}" for v in victims})
        if not job.held:
            job.held = True
            self._backlog.remove(job.job)

    def _hold(self, job: SimJob, at: float, reason: str) -> None:
        """A user held the queued job: out of the queue (and its array's slot) until
        released."""
        if self._queued.pop(job.name, None) is not None and not job.held:
            self._backlog.remove(job.job)
        job.held = False
        self._dependencies.release(job)
        self._victim_waits.forget(job.name)
        for following in self._slots.stopped(job):
            self._enqueue(following, at, ScenarioJobState.QUEUED)
        job.state = ScenarioJobState.HELD
        job.reason = reason
        self.events.append(Event(at, job.name, "held", reason=reason))
        self._moved(job)

    def _unhold(self, job: SimJob, at: float, reason: str) -> None:
        """A user released the held job: it waits in its queue again."""
        job.reason = reason  # until a round (or its dependencies, its array) says more
        self._enqueue(job, at, ScenarioJobState.QUEUED)
        self.events.append(Event(at, job.name, "released", reason=reason))
