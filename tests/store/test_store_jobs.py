"""The store contract for jobs, runs and events: run against SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from store_support import job

from flotilla.store import (
    DuplicateJobError,
    IllegalTransitionError,
    InvalidJobError,
    JobState,
    NotFoundError,
    RunRequest,
    RunState,
    SqlStore,
    StaleRunError,
    Transition,
)


def snapshot(store: SqlStore) -> tuple[int, list[str]]:
    """What a failed write must leave untouched: the serial and every job's state."""
    jobs = store.list_jobs(limit=10_000).jobs
    return store.latest_serial(), [f"{record.id}:{record.state}" for record in jobs]


def test_submit_stores_queued_jobs_with_their_spec(store: SqlStore) -> None:
    ids = store.submit_jobs([job("train", priority=5, labels={"team": "a"}, user="ana")])
    record = store.get_job(ids[0])
    assert (record.name, record.queue, record.state) == ("train", "team-a", JobState.QUEUED)
    assert (record.priority, record.owner, record.labels) == (5, "ana", {"team": "a"})
    assert record.spec == job("train", priority=5, labels={"team": "a"}, user="ana")
    assert record.run is None and not record.cancel_requested


def test_count_expands_to_named_jobs_in_order(store: SqlStore) -> None:
    ids = store.submit_jobs([job("sweep", count=3), job("single")], owner="bo")
    names = [store.get_job(job_id).name for job_id in ids]
    assert names == ["sweep-0", "sweep-1", "sweep-2", "single"]
    assert {store.get_job(job_id).owner for job_id in ids} == {"bo"}


def test_batch_with_unknown_queue_stores_nothing(store: SqlStore) -> None:
    before = snapshot(store)
    with pytest.raises(InvalidJobError, match="no such queue"):
        store.submit_jobs([job("a"), job("b"), job("c", queue="nope")])
    assert snapshot(store) == before


def test_duplicate_names_in_a_batch_store_nothing(store: SqlStore) -> None:
    with pytest.raises(DuplicateJobError, match="'x'"):
        store.submit_jobs([job("x"), job("y"), job("x")])
    assert store.list_jobs().jobs == []


def test_a_name_submitted_again_gives_another_job_and_means_the_newest(
    store: SqlStore,
) -> None:
    """As ``sbatch job.sh`` three times gives three jobs (issue 37): a name in use, even by an
    unfinished job, gives another job, and a reference by name means the newest."""
    [first] = store.submit_jobs([job("x")])
    [second] = store.submit_jobs([job("new"), job("x")])[1:]
    [third] = store.submit_jobs([job("x")])
    assert len({first, second, third}) == 3
    assert [record.state for record in store.list_jobs(name_contains="x").jobs] == [
        JobState.QUEUED
    ] * 3
    assert store.find_job("x").id == third and store.find_job("team-a/x").id == third
    [dependent] = store.submit_jobs([job("after", depends_on=[{"job": "x"}])])
    assert [item.job_id for item in store.get_job(dependent).dependencies] == [third]


@pytest.mark.parametrize("ending", [JobState.CANCELLED, JobState.SUCCEEDED])
def test_name_of_a_finished_job_may_be_used_again(store: SqlStore, ending: JobState) -> None:
    [first] = store.submit_jobs([job("hello")])
    if ending is JobState.CANCELLED:
        store.cancel(first, "done with it")
    else:
        run = store.record_run(first, "c1", {}, reason="fits")
        for state in (JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED):
            store.transition(first, state, state.value, run=run.id)
    [second] = store.submit_jobs([job("hello")])
    assert second != first
    assert [record.name for record in store.list_jobs().jobs] == ["hello", "hello"]


def test_lifecycle_records_an_event_for_every_transition(store: SqlStore) -> None:
    [job_id] = store.submit_jobs([job("run-me")])
    assignment = {"tasks": [{"task": "main", "replica": 0, "node": "n1", "gpus": [0, 1]}]}
    run = store.record_run(job_id, "c1", assignment, reason="fits on c1")
    assert (run.state, run.attempt, run.assignment) == (RunState.LEASED, 1, assignment)
    store.transition(job_id, JobState.PENDING, "dispatched", run=run.id)
    store.transition(job_id, JobState.RUNNING, "started", run=run.id)
    done = store.transition(job_id, JobState.SUCCEEDED, "exit 0", run=run.id, exit_code=0)
    assert done.state is JobState.SUCCEEDED and done.reason == "exit 0"
    assert done.run is not None and done.run.state is RunState.SUCCEEDED
    assert done.run.exit_code == 0 and done.run.started_at is not None
    assert done.run.finished_at is not None
    events = store.events(job_id)
    assert [(event.from_state, event.to_state) for event in events] == [
        (None, JobState.QUEUED),
        (JobState.QUEUED, JobState.LEASED),
        (JobState.LEASED, JobState.PENDING),
        (JobState.PENDING, JobState.RUNNING),
        (JobState.RUNNING, JobState.SUCCEEDED),
    ]
    assert [event.reason for event in events][1:] == [
        "fits on c1",
        "dispatched",
        "started",
        "exit 0",
    ]
    assert all(event.run_id == run.id for event in events[1:])


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ([], JobState.RUNNING),
        ([], JobState.SUCCEEDED),
        ([], JobState.LEASED),
        ([JobState.LEASED, JobState.RUNNING], JobState.PENDING),
        ([JobState.LEASED, JobState.RUNNING, JobState.SUCCEEDED], JobState.QUEUED),
        ([JobState.CANCELLED], JobState.RUNNING),
    ],
)
def test_illegal_transitions_raise_and_write_nothing(
    store: SqlStore, path: list[JobState], illegal: JobState
) -> None:
    [job_id] = store.submit_jobs([job("j")])
    for state in path:
        if state is JobState.LEASED:
            store.record_run(job_id, "c1", {})
        else:
            store.transition(job_id, state, "step")
    before, events = snapshot(store), store.events(job_id)
    with pytest.raises(IllegalTransitionError, match=f"to {illegal}"):
        store.transition(job_id, illegal, "nope")
    assert snapshot(store) == before and store.events(job_id) == events


def test_a_job_is_leased_only_from_queued(store: SqlStore) -> None:
    [job_id] = store.submit_jobs([job("j")])
    store.record_run(job_id, "c1", {})
    with pytest.raises(IllegalTransitionError):
        store.record_run(job_id, "c2", {})
    assert len(store.runs(job_id)) == 1


def test_preempted_job_requeues_and_gets_a_second_run(store: SqlStore) -> None:
    [job_id] = store.submit_jobs([job("j")])
    first = store.record_run(job_id, "c1", {})
    store.transition(job_id, JobState.RUNNING, "started")
    store.transition(job_id, JobState.PREEMPTED, "higher priority job", run=first.id)
    store.transition(job_id, JobState.QUEUED, "requeued after preemption")
    second = store.record_run(job_id, "c2", {})
    assert second.attempt == 2 and second.id != first.id
    runs = store.runs(job_id)
    assert [(run.attempt, run.state) for run in runs] == [
        (1, RunState.PREEMPTED),
        (2, RunState.LEASED),
    ]
    with pytest.raises(StaleRunError):
        store.transition(job_id, JobState.FAILED, "late report", run=first.id)
    assert store.get_job(job_id).state is JobState.LEASED


def test_returning_a_lease_ends_the_run_as_returned(store: SqlStore) -> None:
    [job_id] = store.submit_jobs([job("j")])
    run = store.record_run(job_id, "c1", {})
    record = store.transition(job_id, JobState.QUEUED, "cluster c1 lost", message="gone")
    assert record.state is JobState.QUEUED
    assert record.run is not None and record.run.id == run.id
    assert record.run.state is RunState.RETURNED and record.run.message == "gone"


def test_batches_of_transitions_and_runs_are_atomic(store: SqlStore) -> None:
    ids = store.submit_jobs([job(f"j{index}") for index in range(3)])
    before = snapshot(store)
    requests = [RunRequest(job_id, "c1") for job_id in ids] + [RunRequest(ids[0], "c1")]
    with pytest.raises(IllegalTransitionError):
        store.record_runs(requests)
    assert snapshot(store) == before and store.runs(ids[0]) == []
    store.record_runs([RunRequest(job_id, "c1") for job_id in ids])
    changes = [Transition(ids[0], JobState.RUNNING, "up"), Transition(ids[1], JobState.QUEUED, "x")]
    changes.append(Transition(ids[2], JobState.QUEUED, "not from leased twice"))
    changes.append(Transition(ids[2], JobState.SUCCEEDED, "queued cannot succeed"))
    before = snapshot(store)
    with pytest.raises(IllegalTransitionError):
        store.transition_many(changes)
    assert snapshot(store) == before


def test_a_batch_in_order_with_and_without_records(store: SqlStore) -> None:
    first, second = store.submit_jobs([job("first"), job("second")])
    store.record_runs([RunRequest(first, "c1", {"node": "n1"}), RunRequest(second, "c1")])
    changes = [
        Transition(first, JobState.PENDING, "sent"),
        Transition(first, JobState.RUNNING, "up"),
    ]
    records = store.transition_many(changes)
    assert [record.state for record in records] == [JobState.RUNNING, JobState.RUNNING]
    assert records[0].run is not None and records[0].run.assignment == {"node": "n1"}
    assert [event.to_state for event in store.events(first)][-2:] == [
        JobState.PENDING,
        JobState.RUNNING,
    ]
    serial = store.latest_serial()
    assert store.transition_many([Transition(second, JobState.RUNNING, "up")], records=False) == []
    (changed,) = store.jobs_since(serial)
    assert changed.id == second and changed.state is JobState.RUNNING
    assert changed.run is not None and changed.run.state is RunState.RUNNING


def test_cancel_queued_is_immediate_active_is_requested(store: SqlStore) -> None:
    queued, active = store.submit_jobs([job("q"), job("a")])
    assert store.cancel(queued, "user asked").state is JobState.CANCELLED
    store.record_run(active, "c1", {})
    requested = store.cancel(active, "user asked")
    assert requested.state is JobState.LEASED and requested.cancel_requested
    assert [event.kind for event in store.events(active)][-1] == "cancel_requested"
    store.transition(active, JobState.CANCELLED, "stopped after cancel request")
    finished = store.get_job(active)
    assert store.cancel(active, "again") == finished


def test_unknown_ids_raise_not_found(store: SqlStore) -> None:
    with pytest.raises(NotFoundError):
        store.get_job("missing")
    with pytest.raises(NotFoundError):
        store.transition("missing", JobState.CANCELLED, "x")
    with pytest.raises(NotFoundError):
        store.events("missing")


def test_every_write_gives_a_fresh_higher_serial(store: SqlStore) -> None:
    a, b = store.submit_jobs([job("a"), job("b")])
    serials = [store.get_job(a).serial, store.get_job(b).serial]
    store.record_run(a, "c1", {})
    serials.append(store.get_job(a).serial)
    store.cancel(b, "x")
    serials.append(store.get_job(b).serial)
    assert serials == sorted(set(serials))
    assert store.latest_serial() == serials[-1]


def test_jobs_since_returns_exactly_the_changed_jobs_in_serial_order(store: SqlStore) -> None:
    ids = store.submit_jobs([job(f"j{index}") for index in range(5)])
    mark = store.latest_serial()
    store.record_run(ids[3], "c1", {})
    store.cancel(ids[1], "x")
    store.record_run(ids[4], "c1", {})
    changed = store.jobs_since(mark)
    assert [record.id for record in changed] == [ids[3], ids[1], ids[4]]
    assert changed[0].run is not None and changed[0].run.cluster == "c1"
    assert store.jobs_since(changed[-1].serial) == []
    paged = store.jobs_since(0, limit=2) + store.jobs_since(store.jobs_since(0, limit=2)[-1].serial)
    assert {record.id for record in paged} == set(ids)


def test_list_jobs_filters_and_pages_by_keyset(store: SqlStore) -> None:
    ids = store.submit_jobs([job(f"a{index}") for index in range(5)], owner="ana")
    other = store.submit_jobs([job("b0", queue="team-b")], owner="bo")
    store.cancel(ids[2], "x")
    pages: list[list[str]] = []
    cursor: int | None = None
    while True:
        page = store.list_jobs(queue="team-a", limit=2, after=cursor)
        pages.append([record.id for record in page.jobs])
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages == [ids[0:2], ids[2:4], ids[4:5]]
    queued = store.list_jobs(states=[JobState.QUEUED]).jobs
    assert [record.id for record in queued] == [*ids[:2], *ids[3:], *other]
    assert [record.id for record in store.list_jobs(owner="bo").jobs] == other
