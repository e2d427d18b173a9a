"""``commit_cycle``: a scheduling cycle's transitions and leases in one transaction, with the
change feed read in it. Run against SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from store_support import job

from flotilla.jobdb import JobDb
from flotilla.store import (
    CycleWrite,
    IllegalTransitionError,
    JobState,
    RunRequest,
    SqlStore,
    StaleRunError,
    Transition,
)


def history(store: SqlStore, job_ids: list[str]) -> list[object]:
    """Everything a failed write must leave as it was: serial, jobs, runs and events."""
    return [
        store.latest_serial(),
        *((store.get_job(i), store.runs(i), store.events(i)) for i in job_ids),
    ]


def test_transitions_then_leases_in_one_write_with_the_feed_up_to_it(store: SqlStore) -> None:
    waiting, dispatched = store.submit_jobs([job("waiting"), job("dispatched")])
    store.record_run(dispatched, "c1", {})
    since = store.latest_serial()
    [other] = store.submit_jobs([job("submitted-meanwhile")])  # another writer, before this one
    write = CycleWrite(
        transitions=[
            Transition(dispatched, JobState.PENDING, "dispatched"),
            Transition(dispatched, JobState.RUNNING, "started"),
        ],
        runs=[RunRequest(waiting, "c1", {"placements": []})],
    )

    done = store.commit_cycle(write, since=since)

    assert [run.job_id for run in done.runs] == [waiting]
    assert [record.id for record in done.changes] == [other, dispatched, waiting]
    assert [record.serial for record in done.changes] == sorted(
        record.serial for record in done.changes
    )
    assert done.changes[-1].serial == store.latest_serial()
    by_id = {record.id: record for record in done.changes}
    assert by_id == {i: store.get_job(i) for i in (other, dispatched, waiting)}
    assert by_id[waiting].state is JobState.LEASED and by_id[waiting].run == done.runs[0]
    assert [event.to_state for event in store.events(dispatched)][-2:] == [
        JobState.PENDING,
        JobState.RUNNING,
    ]


def test_an_empty_write_is_the_change_feed_alone(store: SqlStore) -> None:
    ids = store.submit_jobs([job(f"j{index}") for index in range(3)])
    since = store.get_job(ids[0]).serial
    before = store.latest_serial()
    done = store.commit_cycle(CycleWrite(), since=since)
    assert done.runs == [] and [record.id for record in done.changes] == ids[1:]
    assert store.latest_serial() == before


@pytest.mark.parametrize("broken", ["lease of a leased job", "stale run", "illegal transition"])
def test_a_cycle_write_is_all_or_nothing(store: SqlStore, broken: str) -> None:
    queued, leased, running = store.submit_jobs([job("q"), job("l"), job("r")])
    store.record_run(leased, "c1", {})
    old_run = store.record_run(running, "c1", {})
    store.transition(running, JobState.QUEUED, "returned")
    store.record_run(running, "c1", {})
    bad = {
        "lease of a leased job": CycleWrite(runs=[RunRequest(leased, "c1")]),
        "stale run": CycleWrite(
            transitions=[Transition(running, JobState.RUNNING, "late", run=old_run.id)]
        ),
        "illegal transition": CycleWrite(transitions=[Transition(queued, JobState.RUNNING, "x")]),
    }[broken]
    write = CycleWrite(
        transitions=[Transition(leased, JobState.PENDING, "dispatched"), *bad.transitions],
        runs=[RunRequest(queued, "c1"), *bad.runs] if broken != "illegal transition" else [],
    )
    before = history(store, [queued, leased, running])
    with pytest.raises((IllegalTransitionError, StaleRunError)):
        store.commit_cycle(write, since=0)
    assert history(store, [queued, leased, running]) == before


def test_a_jobdb_fed_by_cycle_writes_equals_a_full_reload(store: SqlStore) -> None:
    ids = store.submit_jobs([job(f"j{index}") for index in range(6)])
    jobdb = JobDb.load(store)
    store.record_run(ids[5], "c1", {})  # a write the JobDb has not seen
    applied = jobdb.apply_feed(
        jobdb.serial,
        store.commit_cycle(
            CycleWrite(runs=[RunRequest(job_id, "c1") for job_id in ids[:3]]),
            since=jobdb.serial,
        ).changes,
    )
    assert {record.id for record in applied} == {*ids[:3], ids[5]}
    stale_since = jobdb.serial - 1  # a feed that overlaps what the JobDb holds
    done = store.commit_cycle(
        CycleWrite(transitions=[Transition(ids[0], JobState.PENDING, "dispatched")]),
        since=stale_since,
    )
    jobdb.apply_feed(stale_since, done.changes)
    reloaded = JobDb.load(store)
    assert jobdb.serial == reloaded.serial == store.latest_serial()
    assert {r.id: r for r in jobdb.read_txn()} == {r.id: r for r in reloaded.read_txn()}
    with pytest.raises(ValueError, match="skips"):
        jobdb.apply_feed(jobdb.serial + 1, [])


@pytest.mark.parametrize("empty", [True, False])
def test_the_feed_paces_itself_holding_no_lock(store: SqlStore, empty: bool) -> None:
    # The loop's feed of a 1,000-job submission is tens of milliseconds of parsing: it lets a
    # GET go first between records, so no lock may be held meanwhile — another writer (here
    # a submission made while the loop paces) commits at once.
    ids = store.submit_jobs([job(f"j{index}") for index in range(3)])
    queued = store.submit_jobs([job("to-lease")])[0]
    since = store.get_job(ids[0]).serial
    made: list[str] = []

    def pace() -> None:
        made.extend(store.submit_jobs([job(f"meanwhile-{len(made)}")]))

    write = CycleWrite() if empty else CycleWrite(runs=[RunRequest(queued, "c1", {})])
    done = store.commit_cycle(write, since=since, pace=pace)
    assert [record.id for record in done.changes] == [*ids[1:], queued]
    assert len(made) == len(done.changes)  # one pace per record of the feed
