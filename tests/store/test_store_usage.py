"""Accounting from the run history: resource-hours per queue, owner and job over a range.
SQLite and PostgreSQL, like every store contract test (the time arithmetic is in SQL)."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from store_support import FakeClock, job

from flotilla.model.gpu_use import GpuUse
from flotilla.store import JobState, SqlStore, Transition, UsageGrouping, UsageQuery

HOUR = 3600.0


def placements(task: str, replicas: int) -> dict[str, object]:
    return {"placements": [{"task": task, "replica": i, "node": "n0"} for i in range(replicas)]}


def run_for(store: SqlStore, clock: FakeClock, job_id: str, hours: float, **ends: object) -> None:
    """Lease, start, run ``hours`` of fake time, then succeed (or stay running: end=None)."""
    spec = store.get_job(job_id).spec
    task = spec.tasks[0]
    store.record_run(job_id, "c1", placements(task.name, task.replicas))
    store.transition(job_id, JobState.RUNNING, "started")
    clock.advance(hours * HOUR)
    if ends.get("end", "succeeded") is not None:
        store.transition(job_id, JobState.SUCCEEDED, "done")


def gpu_job(name: str, queue: str = "team-a", replicas: int = 1, **fields: object) -> object:
    return job(
        name,
        queue,
        tasks=[
            {
                "name": "main",
                "replicas": replicas,
                "resources": {"cpu": 4, "memory": "8Gi", "gpu": 2},
            }
        ],
        **fields,
    )


def test_usage_multiplies_each_replica_request_by_the_hours_it_ran(
    store: SqlStore, clock: FakeClock
) -> None:
    start = clock.now
    (train,) = store.submit_jobs([gpu_job("train", replicas=2)])  # type: ignore[list-item]
    run_for(store, clock, train, hours=1.5)
    report = store.usage(UsageQuery(since=start, until=clock.now + timedelta(hours=1)))
    (row,) = report.rows
    assert row.key == {"queue": "team-a"}
    assert (row.jobs, row.runs) == (1, 1)
    assert row.elapsed_hours == pytest.approx(1.5)
    assert row.cpu_hours == pytest.approx(2 * 4 * 1.5)
    assert row.memory_gib_hours == pytest.approx(2 * 8 * 1.5)
    assert row.gpu_hours == pytest.approx(2 * 2 * 1.5)


def test_runs_are_clipped_to_the_range_and_a_running_run_counts_up_to_now(
    store: SqlStore, clock: FakeClock
) -> None:
    start = clock.now
    done, running = store.submit_jobs([job("done"), job("running", "team-b")])
    run_for(store, clock, done, hours=4)  # from start to start+4h
    run_for(store, clock, running, hours=2, end=None)  # from start+4h, still running at +6h
    since, until = start + timedelta(hours=3), start + timedelta(hours=10)
    report = store.usage(UsageQuery(since=since, until=until))
    by_queue = {row.key["queue"]: row for row in report.rows}
    assert by_queue["team-a"].cpu_hours == pytest.approx(1.0)  # 3h..4h of a 1-cpu job
    assert by_queue["team-b"].cpu_hours == pytest.approx(2.0)  # 4h..now (6h)
    assert report.total is not None and report.total.cpu_hours == pytest.approx(3.0)
    before = store.usage(UsageQuery(since=start - timedelta(hours=5), until=start))
    assert before.rows == [] and before.total is not None and before.total.runs == 0


def test_each_attempt_counts_and_a_run_that_never_ran_counts_nothing(
    store: SqlStore, clock: FakeClock
) -> None:
    start = clock.now
    retried, never = store.submit_jobs([job("retried"), job("never")])
    store.record_run(retried, "c1", placements("main", 1))
    store.transition(retried, JobState.RUNNING, "started")
    clock.advance(HOUR)
    store.transition(retried, JobState.QUEUED, "node lost")
    run_for(store, clock, retried, hours=2)
    store.record_run(never, "c1", placements("main", 1))
    clock.advance(HOUR)
    store.cancel(never, "changed my mind")
    store.transition(never, JobState.CANCELLED, "stopped")
    (row,) = store.usage(UsageQuery(since=start, until=clock.now, by=UsageGrouping.JOB)).rows
    assert row.key["name"] == "retried" and row.runs == 2
    assert row.cpu_hours == pytest.approx(3.0)


def test_usage_groups_by_owner_and_by_job(store: SqlStore, clock: FakeClock) -> None:
    start = clock.now
    ids = store.submit_jobs([job("a1", user="ana"), job("a2", user="ana"), job("b1", user="bo")])
    for job_id in ids:
        run_for(store, clock, job_id, hours=1)
    owners = store.usage(UsageQuery(since=start, until=clock.now, by=UsageGrouping.OWNER))
    assert [(row.key["owner"], row.jobs, row.cpu_hours) for row in owners.rows] == [
        ("ana", 2, pytest.approx(2.0)),
        ("bo", 1, pytest.approx(1.0)),
    ]
    per_job = store.usage(UsageQuery(since=start, until=clock.now, by=UsageGrouping.JOB))
    assert sorted(row.key["name"] or "" for row in per_job.rows) == ["a1", "a2", "b1"]
    assert {row.key["owner"] for row in per_job.rows} == {"ana", "bo"}


def test_usage_shows_only_visible_queues_and_the_callers_own_jobs(
    store: SqlStore, clock: FakeClock
) -> None:
    start = clock.now
    ids = store.submit_jobs(
        [job("mine", "team-b", user="ana"), job("theirs", "team-b", user="bo"), job("open")]
    )
    for job_id in ids:
        run_for(store, clock, job_id, hours=1)
    query = UsageQuery(
        since=start,
        until=clock.now,
        by=UsageGrouping.JOB,
        visible_queues=frozenset({"team-a"}),
        visible_owner="ana",
    )
    assert sorted(row.key["name"] or "" for row in store.usage(query).rows) == ["mine", "open"]


def test_a_range_that_ends_before_it_starts_is_refused(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="until must be after since"):
        UsageQuery(since=clock.now, until=clock.now)


def test_a_run_ends_at_its_engines_time_within_its_start_and_now(
    store: SqlStore, clock: FakeClock
) -> None:
    """A run whose end the scheduler learned late (it was down) ends when the engine says
    it did, and usage counts that; an engine time past now or before the start is clamped."""
    start = clock.now
    late, skewed_ahead, skewed_behind = store.submit_jobs(
        [job("late"), job("ahead"), job("behind")]
    )
    for job_id in (late, skewed_ahead, skewed_behind):
        store.record_run(job_id, "c1", placements("main", 1))
    engine_start = start - timedelta(minutes=1)  # the engine started it before we heard
    store.transition_many(
        [
            Transition(job_id, JobState.RUNNING, "started", started_at=engine_start)
            for job_id in (late, skewed_ahead, skewed_behind)
        ]
    )
    clock.advance(3 * HOUR)  # the scheduler was down; the engine's runs ended meanwhile
    ends = {
        late: start + timedelta(hours=1),
        skewed_ahead: clock.now + timedelta(hours=5),
        skewed_behind: engine_start - timedelta(hours=1),
    }
    store.transition_many(
        [
            Transition(job_id, JobState.SUCCEEDED, "exited 0", exit_code=0, finished_at=end)
            for job_id, end in ends.items()
        ]
    )
    runs = {job_id: store.runs(job_id)[-1] for job_id in ends}
    assert runs[late].started_at == engine_start
    assert runs[late].finished_at == start + timedelta(hours=1)
    assert runs[skewed_ahead].finished_at == clock.now
    assert runs[skewed_behind].finished_at == engine_start
    query = UsageQuery(since=start - HOUR_DELTA, until=clock.now, by=UsageGrouping.JOB)
    used = {row.key["job"]: row.elapsed_hours for row in store.usage(query).rows}
    assert used[late] == pytest.approx(1 + 1 / 60)  # not the 3 h the scheduler was down
    assert used.get(skewed_behind, 0.0) == pytest.approx(0.0)


HOUR_DELTA = timedelta(hours=1)


def test_decayed_usage_from_run_history_halves_per_half_life(
    store: SqlStore, clock: FakeClock
) -> None:
    # The fair-share ledger's start after a restart (settings.usage_half_life): team-a held
    # 8 cpu (2 × 4) from 0 to 1h, team-b 1 cpu from 1h and still runs at 2h. With a half-life
    # of 1h, read at 2h: team-a 8 · τ · (2^-1 − 2^-2), team-b 1 · τ · (1 − 2^-1), τ = h/ln 2.
    train, other = store.submit_jobs([gpu_job("train", replicas=2), job("other", "team-b")])
    run_for(store, clock, train, hours=1)
    run_for(store, clock, other, hours=1, end=None)
    now, usage = store.decayed_usage(HOUR)
    assert now == clock.now
    tau = HOUR / math.log(2)
    assert usage["team-a"]["cpu"] == pytest.approx(8 * tau / 4, rel=1e-6)
    assert usage["team-a"]["gpu"] == pytest.approx(4 * tau / 4, rel=1e-6)
    assert usage["team-b"]["cpu"] == pytest.approx(tau / 2, rel=1e-6)


def test_usage_reports_gpu_hours_used_and_efficiency_of_the_measured_runs(
    store: SqlStore, clock: FakeClock
) -> None:
    """Issue 26: GPU-hours held vs used, like ``seff``. The measured figures of a run are
    scaled to the part of it inside the range; runs never measured add nothing."""
    start = clock.now
    measured, unmeasured = store.submit_jobs(
        [gpu_job("measured"), gpu_job("unmeasured", "team-b")]  # type: ignore[list-item]
    )
    run_for(store, clock, measured, hours=2)
    run_for(store, clock, unmeasured, hours=1)
    [run] = store.runs(measured)
    store.record_gpu_use(
        {run.id: GpuUse(held_gpu_seconds=2 * 2 * HOUR, used_gpu_seconds=2 * 2 * HOUR * 0.25)}
    )
    assert store.runs(measured)[0].gpu == GpuUse(
        held_gpu_seconds=2 * 2 * HOUR, used_gpu_seconds=HOUR
    )
    whole = store.usage(UsageQuery(since=start, until=clock.now))
    by_queue = {row.key["queue"]: row for row in whole.rows}
    assert by_queue["team-a"].gpu_hours == pytest.approx(4.0)
    assert by_queue["team-a"].gpu_used_hours == pytest.approx(1.0)
    assert by_queue["team-a"].gpu_efficiency == pytest.approx(0.25)
    assert by_queue["team-b"].gpu_used_hours == 0.0
    assert by_queue["team-b"].gpu_efficiency is None
    assert whole.total is not None and whole.total.gpu_efficiency == pytest.approx(0.25)
    first_hour = store.usage(UsageQuery(since=start, until=start + timedelta(hours=1)))
    assert first_hour.rows[0].gpu_used_hours == pytest.approx(0.5)
