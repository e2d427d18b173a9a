"""The job and run state machines, specified as complete tables: every (from, to) pair, legal or
not, tried on every store (SQLite and PostgreSQL).

The tables below are written out here on purpose, not read from ``flotilla.store.states``: a
change to the store's table that allows an illegal move (back to ``queued`` from an end, or
forward to ``running`` from ``queued``) must make this test fail, not follow along.

A legal move changes the job's state, appends exactly one event naming (from, to) and moves the
job's active run to the state the table gives. An illegal one raises ``IllegalTransitionError``
and writes nothing: no state, no event, no run, no serial.
"""

from __future__ import annotations

import pytest
from store_support import job

from flotilla.store import (
    IllegalTransitionError,
    JobState,
    RunState,
    SqlStore,
    StaleRunError,
    StoreError,
)

Q, L, P, R = JobState.QUEUED, JobState.LEASED, JobState.PENDING, JobState.RUNNING
S, F, C, X = JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.PREEMPTED
H, K = JobState.HELD, JobState.SKIPPED

LEGAL_JOB_MOVES: dict[JobState, set[JobState]] = {
    Q: {L, H, C, F, K},  # leased only through record_run; a queued job never runs or succeeds
    H: {Q, C, F, K},  # held: released to queued, or ends without ever running
    L: {P, R, Q, S, F, C, X},  # a short job may end before the store hears it started
    P: {R, Q, S, F, C, X},
    R: {Q, S, F, C, X},
    X: {Q, C, F},  # a preempted job waits to be requeued; it never jumps back to running
    S: set(),
    F: set(),
    C: set(),
    K: set(),  # skipped: a dependency ended as its condition does not accept
}
"""The job state machine: from → every state it may move to."""

RUN_STATE_AFTER: dict[JobState, RunState] = {
    L: RunState.LEASED,
    P: RunState.PENDING,
    R: RunState.RUNNING,
    S: RunState.SUCCEEDED,
    F: RunState.FAILED,
    C: RunState.CANCELLED,
    X: RunState.PREEMPTED,
    Q: RunState.RETURNED,
}
"""What the job's active run becomes when the job moves to a state."""

ACTIVE_RUN_STATES = {RunState.LEASED, RunState.PENDING, RunState.RUNNING}
RUN_ORDER = [RunState.LEASED, RunState.PENDING, RunState.RUNNING]

PATH_TO: dict[JobState, list[JobState]] = {
    Q: [],
    H: [H],
    K: [K],
    L: [L],
    P: [L, P],
    R: [L, P, R],
    S: [L, P, R, S],
    F: [F],
    C: [C],
    X: [L, R, X],
}
"""A legal way to bring a fresh job into each state."""

RUN_PATH_TO: dict[RunState, list[JobState]] = {
    RunState.LEASED: [L],
    RunState.PENDING: [L, P],
    RunState.RUNNING: [L, P, R],
    RunState.SUCCEEDED: [L, P, R, S],
    RunState.FAILED: [L, F],
    RunState.CANCELLED: [L, R, C],
    RunState.PREEMPTED: [L, R, X],
    RunState.RETURNED: [L, Q],
}
"""A legal way to bring a fresh job's first run into each run state."""


def legal_run_moves(old: RunState) -> set[RunState]:
    """The run state machine: a run only moves forward and ends once."""
    if old not in ACTIVE_RUN_STATES:
        return set()
    later = set(RUN_ORDER[RUN_ORDER.index(old) + 1 :])
    return later | (set(RunState) - ACTIVE_RUN_STATES)


def walk(store: SqlStore, job_id: str, path: list[JobState]) -> None:
    for state in path:
        if state is L:
            store.record_run(job_id, "c1", {})
        else:
            store.transition(job_id, state, f"to {state}")


def footprint(store: SqlStore, job_id: str) -> tuple[object, ...]:
    """Everything a refused move must leave as it was."""
    record = store.get_job(job_id)
    return (
        record.state,
        record.serial,
        record.run,
        tuple(store.events(job_id)),
        tuple(store.runs(job_id)),
        store.latest_serial(),
    )


def attempt(store: SqlStore, job_id: str, new: JobState, run: str | None = None) -> bool:
    """Try the move the way the scheduler makes it; True if the store took it."""
    try:
        if new is L:
            store.record_run(job_id, "c1", {})
        else:
            store.transition(job_id, new, f"try {new}", run=run)
    except IllegalTransitionError:
        return False
    return True


def test_every_job_state_pair_is_allowed_exactly_as_the_table_says(store: SqlStore) -> None:
    wrong: list[str] = []
    for index, (old, new) in enumerate((old, new) for old in JobState for new in JobState):
        [job_id] = store.submit_jobs([job(f"pair-{index}")])
        walk(store, job_id, PATH_TO[old])
        assert store.get_job(job_id).state is old
        before = footprint(store, job_id)
        run_before = store.get_job(job_id).run
        took = attempt(store, job_id, new)
        legal = new in LEGAL_JOB_MOVES[old]
        if took != legal:
            wrong.append(f"{old} -> {new}: {'allowed' if took else 'refused'}")
            continue
        if not took:
            if footprint(store, job_id) != before:
                wrong.append(f"{old} -> {new}: refused but something was written")
            continue
        after = store.get_job(job_id)
        last = store.events(job_id)[-1]
        if after.state is not new or (last.from_state, last.to_state) != (old, new):
            wrong.append(f"{old} -> {new}: stored {after.state}, event {last}")
        if len(store.events(job_id)) != len(before[3]) + 1:
            wrong.append(f"{old} -> {new}: not exactly one event")
        if run_before is not None and run_before.state in ACTIVE_RUN_STATES:
            [ended] = [run for run in store.runs(job_id) if run.id == run_before.id]
            if ended.state is not RUN_STATE_AFTER[new]:
                wrong.append(f"{old} -> {new}: its run became {ended.state}")
    assert wrong == [], "the job state machine differs from its table:\n" + "\n".join(wrong)


def test_transition_never_leases_a_job_only_record_run_does(store: SqlStore) -> None:
    for old in JobState:
        [job_id] = store.submit_jobs([job(f"lease-{old}")])
        walk(store, job_id, PATH_TO[old])
        before = footprint(store, job_id)
        with pytest.raises(IllegalTransitionError):
            store.transition(job_id, L, "a lease without a run")
        assert footprint(store, job_id) == before


def test_every_run_state_pair_moves_forward_only_and_ends_once(store: SqlStore) -> None:
    """A report about a run (``run=`` its id) moves it exactly as the run table says; a run
    that ended never changes again, whatever its job does next."""
    wrong: list[str] = []
    for index, (old, new) in enumerate((old, new) for old in RunState for new in JobState):
        [job_id] = store.submit_jobs([job(f"run-{index}")])
        walk(store, job_id, RUN_PATH_TO[old])
        [run] = store.runs(job_id)
        assert run.state is old
        job_before = store.get_job(job_id).state
        try:
            if new is L:
                store.record_run(job_id, "c1", {})
            else:
                store.transition(job_id, new, f"report {new}", run=run.id)
        except (IllegalTransitionError, StaleRunError):
            pass
        after = next(item for item in store.runs(job_id) if item.id == run.id)
        if old in ACTIVE_RUN_STATES and new is not L and new in LEGAL_JOB_MOVES[job_before]:
            expected = RUN_STATE_AFTER[new]
            if expected not in legal_run_moves(old):
                wrong.append(f"table error: job move {job_before} -> {new} ends run {old}")
        else:
            expected = old
        if after.state is not expected:
            wrong.append(f"run {old}, job to {new}: run became {after.state}, not {expected}")
        for later in store.runs(job_id):
            if later.id != run.id and later.state is not RunState.LEASED:
                wrong.append(f"run {old}: a second run started as {later.state}")
    assert wrong == [], "the run state machine differs from its table:\n" + "\n".join(wrong)


def test_a_job_ended_or_waiting_has_no_active_run_and_an_active_job_has_one(
    store: SqlStore,
) -> None:
    for old in JobState:
        [job_id] = store.submit_jobs([job(f"active-{old}")])
        walk(store, job_id, PATH_TO[old])
        active = [run for run in store.runs(job_id) if run.state in ACTIVE_RUN_STATES]
        expected = 1 if old in (L, P, R) else 0
        assert len(active) == expected, f"a {old} job has {len(active)} active runs"


def test_a_refused_move_is_a_store_error_naming_both_states(store: SqlStore) -> None:
    [job_id] = store.submit_jobs([job("named")])
    walk(store, job_id, PATH_TO[S])
    with pytest.raises(StoreError, match=r"succeeded.*queued|queued.*succeeded"):
        store.transition(job_id, Q, "back to the queue")
