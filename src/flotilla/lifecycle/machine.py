"""The lifecycle core's one entry point: ``step(job, event) -> Transition``.

Given what the core knows of a job (``JobView``) and one event that happened to it
(``events.py``), ``step`` answers with the effects that follow (``effects.py``): a state with
its reason, a run to start, grow or stop, a backoff to hold, an array slot or dependents to
free. Pure and clock-free: no store, no backend, no time read; the service applies the
effects to its store and backends, the simulator to its virtual cluster and clock.

The rules it applies are the core's tables: the transition table (``states.py``), retry
and backoff (``runs.py``), dependency conditions (``dependencies.py``), gangs
(``gangs.py``). Arrays' parallelism is kept per array by ``arrays.ArrayThrottle``, which the
interpreters drive from ``Offer`` and ``FreeArraySlot``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from flotilla.lifecycle import dependencies as rules
from flotilla.lifecycle import gangs
from flotilla.lifecycle.dependencies import Verdict
from flotilla.lifecycle.effects import (
    Effect,
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
    Command,
    DependencyEnded,
    DependencyNeverMet,
    DispatchAccepted,
    DispatchRefused,
    Event,
    Evicted,
    Faulted,
    HoldRequested,
    Outcome,
    ReleaseRequested,
    RequeueRequested,
    RunEnded,
    RunStarted,
    Scheduled,
    Submitted,
    TimerFired,
    TimerKind,
)
from flotilla.lifecycle.runs import EndedAttempt, after_run
from flotilla.lifecycle.states import (
    ACTIVE_JOB_STATES,
    TERMINAL_JOB_STATES,
    WAITING_JOB_STATES,
    JobState,
)
from flotilla.lifecycle.view import DependencyView, JobView

STARTED_REASON = "started"
REQUEUED_AFTER_STOP = "re-queued once its run stopped"
"""Where a preempted (or requeued) job goes once its run's stop is confirmed; its reason
names why the run was stopped, in words only (``re-queued once its run stopped: requeue
requested by alice``): no reason is read back to decide anything."""
REQUEUE_REQUESTED = "requeue requested"
"""How the API words a requeue a user asked for (``requeue requested by alice``)."""
CANCELLED_REASON = "cancelled"
CANCEL_STOP_REASON = "cancelled by request"


@dataclass(frozen=True, slots=True)
class Transition:
    """What an event does to a job: its effects, in the order they apply (none: the event
    does not apply to the job as it stands, e.g. a report about a run it moved on from)."""

    effects: tuple[Effect, ...] = ()

    @property
    def state(self) -> SetState | None:
        """The state it moves to, if any."""
        return next((e for e in self.effects if isinstance(e, SetState)), None)

    def __bool__(self) -> bool:
        return bool(self.effects)


NOTHING = Transition()


def step(job: JobView, event: Event) -> Transition:
    """The effects ``event`` has on ``job``."""
    match event:
        case Submitted() | DependencyEnded():
            return _dependencies(job)
        case Scheduled(cluster=cluster, placements=placements):
            return _scheduled(job, cluster, placements)
        case Evicted(reason=reason):
            if job.state not in ACTIVE_JOB_STATES:
                return NOTHING
            return Transition((StopRun(reason), SetState(JobState.PREEMPTED, reason), *_slot(job)))
        case CancelRequested() | HoldRequested() | ReleaseRequested() | RequeueRequested():
            return _with_slot(job, command(job.state, event, cancel_requested=job.cancel_requested))
        case DispatchAccepted() | DispatchRefused() | Faulted() | DependencyNeverMet():
            return _with_slot(job, outcome(job.state, event))
        case RunStarted():
            if job.state in (JobState.LEASED, JobState.PENDING):
                return Transition((SetState(JobState.RUNNING, STARTED_REASON),))
            return NOTHING
        case RunEnded():
            return _run_ended(job, event)
        case TimerFired(kind=TimerKind.GANG_TIMEOUT):
            if job.state not in WAITING_JOB_STATES or job.spec.gang is None:
                return NOTHING
            return _end(job, JobState.FAILED, gangs.timeout_reason(job.spec, job.last_reason))
        case TimerFired(kind=TimerKind.BACKOFF):
            if job.state is not JobState.QUEUED:
                return NOTHING
            return Transition((Offer(),))
    raise TypeError(f"not a lifecycle event: {event!r}")  # pragma: no cover


def command(
    state: JobState | None, event: Command, *, cancel_requested: bool = False
) -> Transition:
    """What a user's command does to a job in ``state``, from its state alone: the store
    answers it in the request's transaction (``store/cancels.py``, ``requeues.py``,
    ``holds.py``) and the simulator at its timers. ``step`` adds the array slot a waiting
    element frees. NOTHING: the command does not apply (the host says why, or leaves the job
    as it is)."""
    match event:
        case CancelRequested(reason=reason):
            if state is None or state in TERMINAL_JOB_STATES:
                return NOTHING
            if state in ACTIVE_JOB_STATES:  # it ends cancelled when its run does
                return Transition((StopRun(CANCEL_STOP_REASON),))
            return Transition(
                (SetState(JobState.CANCELLED, reason or CANCELLED_REASON), ReleaseDependents())
            )
        case HoldRequested(reason=reason):
            if state is not JobState.QUEUED:
                return NOTHING
            return Transition((SetState(JobState.HELD, reason),))
        case ReleaseRequested(reason=reason):
            if state is not JobState.HELD:
                return NOTHING
            return Transition((SetState(JobState.QUEUED, reason),))
        case RequeueRequested(reason=reason):
            # Like an eviction: the run is stopped and, once its stop is confirmed, the job
            # is queued again for a new run. A job that waits already stays as it is; an
            # ended one has no run to requeue (the host refuses it).
            if state not in ACTIVE_JOB_STATES or cancel_requested:
                return NOTHING
            return Transition((StopRun(reason), SetState(JobState.PREEMPTED, reason)))


def outcome(state: JobState | None, event: Outcome) -> Transition:
    """What the host saw happen to a job in ``state`` outside its run — a dispatch taken or
    refused, a contained fault, a dependency never met — from its state alone (``step`` adds
    the array slot a throttled element frees). ``state`` None: the host does not know it (a
    fault it contained): the answer for any job not ended yet."""
    if state in TERMINAL_JOB_STATES:
        return NOTHING
    match event:
        case DispatchAccepted(cluster=cluster):
            if state is not JobState.LEASED:
                return NOTHING
            return Transition((SetState(JobState.PENDING, f"dispatched to {cluster}"),))
        case DispatchRefused(reason=reason):
            if state not in ACTIVE_JOB_STATES:
                return NOTHING
            return Transition((SetState(JobState.FAILED, reason), ReleaseDependents()))
        case Faulted(reason=reason):
            return Transition((SetState(JobState.FAILED, reason), ReleaseDependents()))
        case DependencyNeverMet(reason=reason):
            if state not in (None, JobState.QUEUED, JobState.HELD, JobState.PREEMPTED):
                return NOTHING
            return Transition((SetState(rules.UNMET_END, reason), ReleaseDependents()))


def _with_slot(job: JobView, answer: Transition) -> Transition:
    """``answer`` with the array slot a throttled element frees when it leaves its place
    (ends, or goes back to waiting), right after its move."""
    moved = answer.state
    if moved is None or moved.state in (JobState.HELD, JobState.QUEUED, JobState.PENDING):
        return answer
    at = answer.effects.index(moved) + 1
    return Transition((*answer.effects[:at], *_slot(job), *answer.effects[at:]))


def _throttled(job: JobView) -> bool:
    array = job.spec.array
    return array is not None and array.parallelism is not None


def _slot(job: JobView) -> tuple[Effect, ...]:
    return (FreeArraySlot(),) if _throttled(job) else ()


def _end(job: JobView, state: JobState, reason: str, *, counted: bool = False) -> Transition:
    """The job ends in the terminal ``state``: its slot and its dependents are freed."""
    return Transition((SetState(state, reason, counted), *_slot(job), ReleaseDependents()))


def dependency_reason(dependencies: Iterable[DependencyView]) -> tuple[Verdict, str]:
    """Where a job stands against its ``dependencies``, and the words for it: what it waits
    for (``WAITING``) or why it can never start (``NEVER``)."""
    waits: list[str] = []
    for dependency in dependencies:
        state = dependency.state
        found = rules.verdict(dependency.condition, state)
        if found is Verdict.MET:
            continue
        if found is Verdict.NEVER:
            assert state is not None
            return Verdict.NEVER, rules.never_reason(dependency.label, dependency.condition, state)
        status = dependency.unknown if state is None else f"it is {state}"
        waits.append(rules.waits_for(dependency.label, dependency.condition, status))
    if waits:
        return Verdict.WAITING, rules.waiting_reason(waits)
    return Verdict.MET, ""


def _dependencies(job: JobView) -> Transition:
    if job.state not in WAITING_JOB_STATES:
        return NOTHING
    found, reason = dependency_reason(job.dependencies)
    if found is Verdict.NEVER:  # the branch not taken: skipped, an end that is no failure
        return _with_slot(job, outcome(job.state, DependencyNeverMet(reason)))
    if found is Verdict.WAITING:
        return Transition((WaitForDependencies(reason),))
    return Transition((Offer(),))


def _scheduled(job: JobView, cluster: str, placements: int) -> Transition:
    if job.state in WAITING_JOB_STATES:
        return Transition((StartRun(cluster, f"scheduled on {cluster}"),))
    if job.state in ACTIVE_JOB_STATES and gangs.may_grow(job.spec):
        placed = job.placed + placements
        wanted = gangs.wanted_replicas(job.spec)
        reason = gangs.growth_reason(placements, placed, wanted, job.cluster or cluster)
        return Transition((GrowRun(placements, placed, wanted, reason),))
    return NOTHING


def _run_ended(job: JobView, event: RunEnded) -> Transition:
    if job.state is JobState.PREEMPTED:  # the evicted (or requeued) run's stop is confirmed
        why = job.last_reason
        return Transition(
            (
                SetState(
                    JobState.QUEUED, f"{REQUEUED_AFTER_STOP}: {why}" if why else REQUEUED_AFTER_STOP
                ),
            )
        )
    if job.state not in ACTIVE_JOB_STATES:
        return NOTHING  # a run the job moved on from (re-queued, ended): an orphan
    outcome = after_run(
        job.spec,
        EndedAttempt(event.status, event.reason, job.attempt, job.failures, job.cancel_requested),
    )
    if outcome.state in TERMINAL_JOB_STATES:
        return _end(job, outcome.state, outcome.reason, counted=outcome.counted)
    effects: list[Effect] = [SetState(outcome.state, outcome.reason, outcome.counted)]
    if outcome.delay > 0:
        effects.append(HoldUntil(outcome.delay))
    return Transition((*effects, *_slot(job)))
