"""Crash safety: a writer killed with SIGKILL at any point loses nothing it committed and leaves
nothing half-written; after a restart every job is accounted for and none has two runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter

from sqlalchemy import text
from tests.timing import limit

from flotilla.faults import ENVIRONMENT
from flotilla.model import JobSpec, QueueSpec, TaskSpec
from flotilla.store import ACTIVE_JOB_STATES, JobState, RunRequest, SqlStore

BATCH = 100

WRITER = """
import sys, time
from sqlalchemy import event
from sqlalchemy.orm import Session
from flotilla.model import JobSpec
from flotilla.store import JobState, RunRequest, SqlStore, make_engine, Transition

url, mode, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = SqlStore(make_engine(url))
def batch(index):
    return [
        JobSpec(name=f"b{index}-{k}", queue="team-a", tasks=[{"name": "t", "resources": {}}])
        for k in range(size)
    ]
if mode == "hold":
    @event.listens_for(Session, "before_commit")
    def _hold(session):
        print("committing", flush=True)
        time.sleep(600)
    store.submit_jobs(batch(0))
    sys.exit(0)
index = 0
previous = []
while True:
    ids = store.submit_jobs(batch(index))
    print(f"submitted {index}", flush=True)
    if previous:
        store.record_runs([RunRequest(job_id, "c1") for job_id in previous])
        store.transition_many([Transition(job_id, JobState.RUNNING, "up") for job_id in previous])
        print(f"running {index - 1}", flush=True)
    previous = ids
    index += 1
"""


def start_writer(url: str, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, url, mode, str(BATCH)], stdout=subprocess.PIPE, text=True
    )


def kill_after(writer: subprocess.Popen[str], line: str) -> list[str]:
    """Read the writer's reports until ``line``, then SIGKILL it; returns what it reported."""
    assert writer.stdout is not None
    seen: list[str] = []
    while line not in seen:
        report = writer.stdout.readline().strip()
        assert report, f"writer ended before {line!r}: {seen}"
        seen.append(report)
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    return seen


def assert_not_corrupt(store: SqlStore) -> None:
    with store.engine.connect() as connection:
        if store.engine.dialect.name == "sqlite":
            assert connection.execute(text("PRAGMA integrity_check")).scalar() == "ok"
            assert connection.execute(text("PRAGMA foreign_key_check")).all() == []
        orphans = connection.execute(
            text("SELECT count(*) FROM runs WHERE job_id NOT IN (SELECT id FROM jobs)")
        ).scalar()
        assert orphans == 0


def assert_histories_agree(store: SqlStore) -> None:
    """Each job: at most one run per attempt and one active run, its latest run in the job's
    state, and its last event naming that state."""
    active = ", ".join(f"'{state.value}'" for state in ACTIVE_JOB_STATES)
    checks = {
        "a job with two live runs": f"""SELECT count(*) FROM (SELECT job_id FROM runs
            WHERE state IN ({active}) GROUP BY job_id HAVING count(*) > 1) twice""",
        "an active job whose run disagrees": f"""SELECT count(*) FROM jobs j
            LEFT JOIN runs r ON r.id = j.run_id
            WHERE j.state IN ({active}) AND (r.id IS NULL OR r.state <> j.state)""",
        "a job whose history ends elsewhere": """SELECT count(*) FROM jobs j WHERE j.state <>
            (SELECT e.to_state FROM events e WHERE e.job_id = j.id AND e.to_state IS NOT NULL
             ORDER BY e.id DESC LIMIT 1)""",
    }
    with store.engine.connect() as connection:
        for problem, query in checks.items():
            assert connection.execute(text(query)).scalar() == 0, problem


def prepared(url: str) -> None:
    store = SqlStore.open(url)
    store.put_queue(QueueSpec(name="team-a"))
    store.close()


def test_a_batch_killed_before_commit_leaves_no_job(database_url: str) -> None:
    prepared(database_url)
    kill_after(start_writer(database_url, "hold"), "committing")
    store = SqlStore.open(database_url)
    assert_not_corrupt(store)
    assert store.list_jobs().jobs == [] and store.latest_serial() == 0
    assert store.submit_jobs([]) == []
    store.close()


def test_a_writer_killed_mid_flight_loses_nothing_and_runs_nothing_twice(
    database_url: str,
) -> None:
    prepared(database_url)
    reports = kill_after(start_writer(database_url, "run"), "running 1")
    store = SqlStore.open(database_url)
    assert_not_corrupt(store)
    jobs = store.list_jobs(limit=100_000).jobs
    batches = Counter(record.name.split("-")[0] for record in jobs)
    assert set(batches.values()) == {BATCH}, "a batch was half-written"
    submitted = {report.split()[1] for report in reports if report.startswith("submitted")}
    assert {f"b{index}" for index in submitted} <= set(batches), "a committed batch was lost"
    assert_histories_agree(store)
    # Restart: the recovered store leases every queued job once; no job gets a second run.
    queued = [record.id for record in jobs if record.state is JobState.QUEUED]
    store.record_runs([RunRequest(job_id, "c2") for job_id in queued])
    assert_histories_agree(store)
    assert all(record.run is not None for record in store.list_jobs(limit=100_000).jobs)
    store.close()


CYCLE_WRITER = """
import sys
from flotilla.store import CycleWrite, JobState, RunRequest, SqlStore, Transition, make_engine

url, dispatched, queued = sys.argv[1:4]
store = SqlStore(make_engine(url))
write = CycleWrite(
    transitions=[Transition(dispatched, JobState.PENDING, "dispatched")],
    runs=[RunRequest(queued, "c1")],
)
store.commit_cycle(write, since=0)
"""


def test_a_cycle_write_killed_between_its_transitions_and_its_leases_leaves_nothing(
    database_url: str,
) -> None:
    """``commit_cycle`` is one transaction: a kill after its transitions were applied, before
    its leases (the ``mid-cycle-write`` point), leaves neither."""
    prepared(database_url)
    store = SqlStore.open(database_url)
    dispatched, queued = store.submit_jobs(
        [
            JobSpec(name=name, queue="team-a", tasks=[TaskSpec(name="t", resources={})])
            for name in "ab"
        ]
    )
    store.record_run(dispatched, "c1", {})

    def state() -> list[object]:
        jobs = [store.get_job(dispatched), store.get_job(queued)]
        return [store.latest_serial(), *jobs, *(store.events(job.id) for job in jobs)]

    before = state()
    writer = subprocess.run(
        [sys.executable, "-c", CYCLE_WRITER, database_url, dispatched, queued],
        env={**os.environ, ENVIRONMENT: "mid-cycle-write"},
        capture_output=True,
        text=True,
        timeout=limit(120),
    )
    assert writer.returncode == -signal.SIGKILL, writer.stderr
    assert "flotilla fault: killed at mid-cycle-write" in writer.stderr
    store.close()
    store = SqlStore.open(database_url)
    assert_not_corrupt(store)
    assert state() == before and store.runs(queued) == []
    assert_histories_agree(store)
    store.close()
