"""The store's per-run report (``flotilla sacct``) on SQLite and PostgreSQL: the figures a
backend measured kept on the run (migration 0011), runs selected by the time they were
active, by queue, owner and state, and by what a caller may read."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from store_support import FakeClock, job

from flotilla.model.run_resources import RunResources
from flotilla.store import JobState, RunReportQuery, RunState, SqlStore

MIB = 2**20


def started(store: SqlStore, job_id: str, node: str = "n1") -> str:
    run = store.record_run(
        job_id, "c1", {"placements": [{"task": "main", "replica": 0, "node": node}]}
    )
    store.transition(job_id, JobState.RUNNING, "started")
    return run.id


def test_figures_are_kept_and_runs_selected_by_when_they_were_active(
    store: SqlStore, clock: FakeClock
) -> None:
    old, done, going = store.submit_jobs(
        [job("old", user="ana"), job("done", "team-b", user="bo"), job("going", user="bo")]
    )
    started(store, old)
    store.transition(old, JobState.SUCCEEDED, "ok", exit_code=0)
    clock.advance(3600)
    cutoff = clock.now - timedelta(minutes=1)
    run_id = started(store, done, "n2")
    clock.advance(90)
    store.transition(done, JobState.FAILED, "exited 3", exit_code=3)
    store.record_run_resources({run_id: RunResources(cpu_seconds=75.5, memory_peak=300 * MIB)})
    started(store, going)

    every = store.run_report(RunReportQuery(since=cutoff - timedelta(hours=2)))
    assert [row.name for row in every] == ["old", "done", "going"]
    recent = store.run_report(RunReportQuery(since=cutoff))
    assert [row.name for row in recent] == ["done", "going"]  # old ended before the cutoff
    first = recent[0]
    assert (first.queue, first.owner, first.state, first.exit_code) == (
        "team-b",
        "bo",
        RunState.FAILED,
        3,
    )
    assert (first.cpu_seconds, first.memory_peak, first.nodes) == (75.5, 300 * MIB, ("n2",))
    assert recent[1].cpu_seconds is None and recent[1].memory_peak is None
    [kept] = store.runs(done)
    assert (kept.cpu_seconds, kept.memory_peak) == (75.5, 300 * MIB)

    def names(**filters: Any) -> list[str]:
        query = RunReportQuery(since=cutoff - timedelta(hours=2), **filters)
        return [row.name for row in store.run_report(query)]

    assert names(queues=frozenset({"team-a"})) == ["old", "going"]
    assert names(owner="bo") == ["done", "going"]
    assert names(states=frozenset({RunState.RUNNING, RunState.SUCCEEDED})) == ["old", "going"]
    assert names(visible_queues=frozenset({"team-b"}), visible_owner="ana") == ["old", "done"]
    assert names(limit=1) == ["going"]


def test_figures_of_a_run_the_store_does_not_hold_change_nothing(store: SqlStore) -> None:
    """A backend may report an orphan (a run of another database's state dir): no failure."""
    (known,) = store.submit_jobs([job("known")])
    run_id = started(store, known)
    store.record_run_resources(
        {"no-such-run": RunResources(1.0, MIB), run_id: RunResources(2.0, 2 * MIB)}
    )
    [run] = store.runs(known)
    assert (run.cpu_seconds, run.memory_peak) == (2.0, 2 * MIB)
