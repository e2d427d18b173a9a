"""The lifecycle core's spec: ``step(job, event)`` for each event in each state, as a table.

Each row reads: a job (its state and what else matters), an event, the effects the service
and the simulator then apply. A job state, an event or a rule added to the core gets its rows
here; the interpreters' own tests (``tests/service``, ``tests/sim``) show them applied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest

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
    DependencyEnded,
    Event,
    Evicted,
    RequeueRequested,
    RunEnded,
    RunStarted,
    Scheduled,
    Submitted,
    TimerFired,
    TimerKind,
)
from flotilla.lifecycle.machine import step
from flotilla.lifecycle.runs import RunEnd
from flotilla.lifecycle.states import JOB_STATE_ORDER, TERMINAL_JOB_STATES, JobState, is_allowed
from flotilla.lifecycle.view import DependencyView, JobView
from flotilla.model import JobSpec
from flotilla.model.job import DependencyCondition as C

S = JobState


def spec(**fields: Any) -> JobSpec:
    return JobSpec.model_validate(
        {"name": "train", "queue": "q", "tasks": [{"name": "m", "resources": {"cpu": 1}}]} | fields
    )


PLAIN = spec()
RETRIED = spec(retry={"limit": 2, "delay": "10s", "on": ["failed", "node_failure"]})
ARRAY = spec(array={"size": 4, "parallelism": 2})
GANG = spec(
    tasks=[{"name": "w", "replicas": 4, "resources": {"cpu": 1}}],
    gang={"mode": "non-strict", "min_member": 2, "timeout": 60},
)
STRICT = spec(tasks=[{"name": "w", "replicas": 2, "resources": {"cpu": 1}}], gang={"timeout": 30})


def job(state: JobState | None, base: JobSpec = PLAIN, **fields: Any) -> JobView:
    return JobView(spec=base, state=state, **fields)


def prep(condition: C, state: str | None) -> tuple[DependencyView, ...]:
    return (DependencyView("job prep", condition, state),)


ENDS = (ReleaseDependents(),)
"""What follows any end: the jobs waiting for it step ``DependencyEnded``."""


@dataclass(frozen=True)
class Row:
    name: str
    job: JobView
    event: Event
    effects: tuple[Effect, ...]


ROWS = [
    # --- submitted, and a dependency ended ------------------------------------------------
    Row("queued, no dependency: offered", job(S.QUEUED), Submitted(), (Offer(),)),
    Row(
        "queued, dependency running: waits, naming it and its state",
        job(S.QUEUED, dependencies=prep(C.SUCCEEDED, "running")),
        Submitted(),
        (WaitForDependencies("waits for job prep to succeed (it is running)"),),
    ),
    Row(
        "queued, dependency not seen yet",
        job(S.QUEUED, dependencies=prep(C.FINISHED, None)),
        Submitted(),
        (WaitForDependencies("waits for job prep to finish (not seen yet)"),),
    ),
    Row(
        "dependency succeeded: released",
        job(S.QUEUED, dependencies=prep(C.SUCCEEDED, "succeeded")),
        DependencyEnded("prep"),
        (Offer(),),
    ),
    Row(
        "finished (afterany) after a cancelled dependency: released",
        job(S.QUEUED, dependencies=prep(C.FINISHED, "cancelled")),
        DependencyEnded("prep"),
        (Offer(),),
    ),
    Row(
        "failed (afternotok) after a cancelled dependency: released",
        job(S.QUEUED, dependencies=prep(C.FAILED, "cancelled")),
        DependencyEnded("prep"),
        (Offer(),),
    ),
    Row(
        "succeeded (afterok) after a failed dependency: skipped, naming it",
        job(S.QUEUED, dependencies=prep(C.SUCCEEDED, "failed")),
        DependencyEnded("prep"),
        (
            SetState(S.SKIPPED, "dependency job prep ended failed; this job needed it succeeded"),
            *ENDS,
        ),
    ),
    Row(
        "finished_not_cancelled after a cancel: skipped",
        job(S.QUEUED, dependencies=prep(C.FINISHED_NOT_CANCELLED, "cancelled")),
        DependencyEnded("prep"),
        (
            SetState(
                S.SKIPPED,
                "dependency job prep ended cancelled; this job needed it finished_not_cancelled",
            ),
            *ENDS,
        ),
    ),
    Row(
        "dependency ended while the job already runs: nothing",
        job(S.RUNNING, dependencies=prep(C.SUCCEEDED, "failed")),
        DependencyEnded("prep"),
        (),
    ),
    # --- decisions --------------------------------------------------------------------------
    Row(
        "queued, scheduled: a run starts",
        job(S.QUEUED),
        Scheduled("east", 1),
        (StartRun("east", "scheduled on east"),),
    ),
    Row(
        "preempted, scheduled again: a new run starts",
        job(S.PREEMPTED),
        Scheduled("west", 1),
        (StartRun("west", "scheduled on west"),),
    ),
    Row(
        "running non-strict gang, 2 of 4 placed, scheduled 1 more: it grows",
        job(S.RUNNING, GANG, placed=2, cluster="east"),
        Scheduled("east", 1),
        (GrowRun(1, 3, 4, "grew by 1 replica to 3 of 4 on east"),),
    ),
    Row(
        "running strict gang, scheduled: nothing (it never grows)",
        job(S.RUNNING, STRICT, placed=2, cluster="east"),
        Scheduled("east", 1),
        (),
    ),
    Row("ended job, scheduled: nothing", job(S.SUCCEEDED), Scheduled("east", 1), ()),
    Row(
        "running, evicted: its run stops and it is preempted",
        job(S.RUNNING),
        Evicted("preempted for q/urgent"),
        (StopRun("preempted for q/urgent"), SetState(S.PREEMPTED, "preempted for q/urgent")),
    ),
    Row(
        "running array element, evicted: its slot is freed too",
        job(S.RUNNING, ARRAY),
        Evicted("fair share"),
        (StopRun("fair share"), SetState(S.PREEMPTED, "fair share"), FreeArraySlot()),
    ),
    Row("queued, evicted: nothing", job(S.QUEUED), Evicted("x"), ()),
    # --- requeue (Slurm's scontrol requeue) ---------------------------------------------------
    Row(
        "running, requeue requested: its run stops and it waits to be queued again",
        job(S.RUNNING),
        RequeueRequested("requeue requested by alice"),
        (
            StopRun("requeue requested by alice"),
            SetState(S.PREEMPTED, "requeue requested by alice"),
        ),
    ),
    Row(
        "requeued, its run's stop confirmed: queued as requested",
        job(S.PREEMPTED, last_reason="requeue requested by alice"),
        RunEnded(RunEnd.CANCELLED),
        (SetState(S.QUEUED, "re-queued once its run stopped: requeue requested by alice"),),
    ),
    Row("queued, requeue requested: nothing", job(S.QUEUED), RequeueRequested("x"), ()),
    Row("failed, requeue requested: nothing", job(S.FAILED), RequeueRequested("x"), ()),
    # --- what the backend reports -------------------------------------------------------------
    Row("leased, run started", job(S.LEASED), RunStarted(), (SetState(S.RUNNING, "started"),)),
    Row("pending, run started", job(S.PENDING), RunStarted(), (SetState(S.RUNNING, "started"),)),
    Row("running, run started again: nothing", job(S.RUNNING), RunStarted(), ()),
    Row(
        "running, run succeeded",
        job(S.RUNNING, attempt=1),
        RunEnded(RunEnd.SUCCEEDED),
        (SetState(S.SUCCEEDED, "exited 0"), *ENDS),
    ),
    Row(
        "leased, a short run succeeded before it was seen running",
        job(S.LEASED, attempt=1),
        RunEnded(RunEnd.SUCCEEDED),
        (SetState(S.SUCCEEDED, "exited 0"), *ENDS),
    ),
    Row(
        "running, command failed, no retry policy: fails",
        job(S.RUNNING, attempt=1),
        RunEnded(RunEnd.FAILED, "exited with code 3", 3),
        (SetState(S.FAILED, "exited with code 3"), *ENDS),
    ),
    Row(
        "running, node lost, no retry policy: re-queued at once, uncounted",
        job(S.RUNNING, attempt=1),
        RunEnded(RunEnd.NODE_FAILURE, "cluster east became unreachable"),
        (SetState(S.QUEUED, "cluster east became unreachable"),),
    ),
    Row(
        "running, run lost, array element: re-queued, its slot freed",
        job(S.RUNNING, ARRAY, attempt=1),
        RunEnded(RunEnd.LOST, "run lost"),
        (SetState(S.QUEUED, "run lost"), FreeArraySlot()),
    ),
    Row(
        "running, covered failure within the limit: re-queued after its backoff",
        job(S.RUNNING, RETRIED, attempt=2, failures=1),
        RunEnded(RunEnd.FAILED, "exited 3", 3),
        (
            SetState(S.QUEUED, "retry 2 of 2: attempt 2 ended (failed: exited 3)", counted=True),
            HoldUntil(20.0),
        ),
    ),
    Row(
        "running, covered failure past the limit: fails, counted",
        job(S.RUNNING, RETRIED, attempt=3, failures=2),
        RunEnded(RunEnd.NODE_FAILURE, "killed by SIGKILL"),
        (
            SetState(
                S.FAILED,
                "killed by SIGKILL (attempt 3, node_failure; retry limit of 2 reached)",
                counted=True,
            ),
            *ENDS,
        ),
    ),
    Row(
        "running, cancel asked, run then failed: cancelled, not retried",
        job(S.RUNNING, RETRIED, attempt=1, cancel_requested=True),
        RunEnded(RunEnd.FAILED, "killed by SIGTERM", -15),
        (SetState(S.CANCELLED, "cancelled: the run ended after the cancel request"), *ENDS),
    ),
    Row(
        "running, run stopped for a cancel",
        job(S.RUNNING, attempt=1, cancel_requested=True),
        RunEnded(RunEnd.CANCELLED, "cancelled"),
        (SetState(S.CANCELLED, "cancelled"), *ENDS),
    ),
    Row(
        "preempted, its run's stop confirmed: re-queued",
        job(S.PREEMPTED),
        RunEnded(RunEnd.CANCELLED),
        (SetState(S.QUEUED, "re-queued once its run stopped"),),
    ),
    Row(
        "queued (re-queued when its cluster was lost), the old run ends: nothing (an orphan)",
        job(S.QUEUED),
        RunEnded(RunEnd.SUCCEEDED),
        (),
    ),
    Row("failed, a late report: nothing", job(S.FAILED), RunEnded(RunEnd.SUCCEEDED), ()),
    # --- what users ask -------------------------------------------------------------------------
    Row(
        "queued, cancel: cancelled at once",
        job(S.QUEUED),
        CancelRequested(),
        (SetState(S.CANCELLED, "cancelled"), *ENDS),
    ),
    Row(
        "queued array element, cancel: cancelled, its slot freed",
        job(S.QUEUED, ARRAY),
        CancelRequested(),
        (SetState(S.CANCELLED, "cancelled"), FreeArraySlot(), *ENDS),
    ),
    Row(
        "preempted, cancel: cancelled at once",
        job(S.PREEMPTED),
        CancelRequested(),
        (SetState(S.CANCELLED, "cancelled"), *ENDS),
    ),
    Row(
        "running, cancel: its run is asked to stop (it ends cancelled when it does)",
        job(S.RUNNING),
        CancelRequested(),
        (StopRun("cancelled by request"),),
    ),
    Row("leased, cancel", job(S.LEASED), CancelRequested(), (StopRun("cancelled by request"),)),
    Row("not submitted, cancel: nothing", job(None), CancelRequested(), ()),
    Row("succeeded, cancel: nothing", job(S.SUCCEEDED), CancelRequested(), ()),
    # --- timers -------------------------------------------------------------------------------
    Row(
        "queued gang, timeout: fails with the last reason it waited for",
        job(S.QUEUED, STRICT, last_reason="needs 2 nodes with 1 cpu free"),
        TimerFired(TimerKind.GANG_TIMEOUT),
        (
            SetState(
                S.FAILED,
                "gang train could not be placed within its timeout of 30s: "
                "needs 2 nodes with 1 cpu free",
            ),
            *ENDS,
        ),
    ),
    Row(
        "queued gang never considered, timeout",
        job(S.QUEUED, STRICT),
        TimerFired(TimerKind.GANG_TIMEOUT),
        (
            SetState(
                S.FAILED,
                "gang train could not be placed within its timeout of 30s: never considered",
            ),
            *ENDS,
        ),
    ),
    Row(
        "running gang, timeout: nothing (it was placed)",
        job(S.RUNNING, STRICT),
        TimerFired(TimerKind.GANG_TIMEOUT),
        (),
    ),
    Row("queued, backoff over: offered", job(S.QUEUED), TimerFired(TimerKind.BACKOFF), (Offer(),)),
    Row("cancelled, backoff over: nothing", job(S.CANCELLED), TimerFired(TimerKind.BACKOFF), ()),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_step(row: Row) -> None:
    assert step(row.job, row.event).effects == row.effects


EVENTS: list[Event] = [
    Submitted(),
    DependencyEnded("prep"),
    Scheduled("east", 1),
    Evicted("x"),
    RunStarted(),
    RunEnded(RunEnd.SUCCEEDED),
    RunEnded(RunEnd.FAILED, "exited 1", 1),
    RunEnded(RunEnd.NODE_FAILURE, "node gone"),
    RunEnded(RunEnd.LOST, "lost"),
    RunEnded(RunEnd.CANCELLED),
    CancelRequested(),
    RequeueRequested("requeue requested by alice"),
    TimerFired(TimerKind.GANG_TIMEOUT),
    TimerFired(TimerKind.BACKOFF),
]


@pytest.mark.parametrize("state", [None, *JOB_STATE_ORDER], ids=lambda s: str(s))
def test_every_event_in_every_state_moves_only_along_the_transition_table(
    state: JobState | None,
) -> None:
    """Whatever the event, a job moves only where the transition table allows (a job leaving
    an active state through a decision or a report), and a terminal job never moves."""
    for base in (PLAIN, RETRIED, ARRAY, GANG, STRICT):
        for event in EVENTS:
            view = job(state, base, attempt=1, placed=2, cluster="east")
            answer = step(view, event)
            change = answer.state
            if state is None or state in TERMINAL_JOB_STATES:
                assert not answer, (state, event)
                continue
            if change is not None:
                assert is_allowed(state, change.state), (state, event, change)
            ends = change is not None and change.state in TERMINAL_JOB_STATES
            assert (ReleaseDependents() in answer.effects) == ends, (state, event)


def test_step_reads_no_clock_and_answers_alike_for_alike() -> None:
    view = job(S.RUNNING, RETRIED, attempt=1)
    event = RunEnded(RunEnd.FAILED, "exited 3", 3)
    assert step(view, event) == step(replace(view), event)
