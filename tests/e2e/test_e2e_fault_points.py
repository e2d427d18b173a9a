"""Kill the scheduler at each named point of its safety code (``flotilla.faults``), then let
it restart — or a standby replica take over — and check nothing was lost or done twice.

Deterministic: the hook fires at exactly the named point (the test checks the process died by
SIGKILL with the hook's last words), unlike a timed ``kill -9`` that lands wherever the loop
happens to be. Every point runs on SQLite and PostgreSQL, with one replica (restarted under
its name) and with two (the standby takes over after the lease's TTL).

Each case asserts: every job accounted for (the workload succeeded, the cancelled job is
cancelled), none ran twice (marks file, one started run per job), none stuck (all end within
the limit), resources released (no active run in the store, no process of any run alive).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flotilla.backends.local.backend import local_node
from flotilla.faults import ENVIRONMENT, POINTS
from flotilla.model import JobSpec, QueueSpec
from flotilla.service.records import cluster_spec_from_inventory
from flotilla.store import JobState, SqlStore
from flotilla.store.states import ACTIVE_RUN_STATES
from tests.e2e.service import kill_leftover_runs, run_records
from tests.live_service import process_gone, read_pids
from tests.timing import deadline, limit, wait_until

REPLICA = Path(__file__).parents[1] / "service" / "loop_process.py"
"""A scheduler replica as its own process (the loop of ``flotilla up``, without the API):
lease TTL 1.5 s, cycle 0.05 s."""
WORKLOAD = 5
LIMIT = 120.0


class Replica:
    def __init__(self, url: str, state_dir: Path, name: str, log: Path, fault: str | None):
        env = {key: value for key, value in os.environ.items() if key != ENVIRONMENT}
        if fault is not None:
            env[ENVIRONMENT] = fault
        self.log = log
        with log.open("ab") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(REPLICA), url, str(state_dir), name],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env,
            )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "ready", log.read_text()

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def setup_store(url: str, tmp_path: Path) -> tuple[SqlStore, list[str], str]:
    store = SqlStore.open(url)
    node = local_node()
    store.upsert_cluster(cluster_spec_from_inventory("local", "local", [node]))
    store.put_queue(QueueSpec(name="default"))
    cpu = node.capacity["cpu"] / 4  # four at a time on any machine: batches of several runs
    marks, victim_pid = tmp_path / "marks", tmp_path / "victim.pid"

    def spec(name: str, command: str) -> JobSpec:
        return JobSpec.model_validate(
            {
                "name": name,
                "queue": "default",
                "tasks": [{"name": "main", "resources": {"cpu": cpu}}],
                "payload": {"command": ["sh", "-c", command]},
            }
        )

    # Its pid as this process sees it: in the job's own PID namespace, $$ is a small number.
    mine = f"read -r pid _ </proc/self/stat; echo $pid > {victim_pid}"
    victim = spec("victim", f"{mine}; exec sleep 600")
    work = [
        spec(f"job-{index}", f'echo "$FLOTILLA_JOB_NAME" >> {marks}; sleep 0.3')
        for index in range(WORKLOAD)
    ]
    [victim_id, *ids] = store.submit_jobs([victim, *work])
    return store, ids, victim_id


FAULTS = [*sorted(POINTS), "after-dispatch@2"]
"""Each point at its first pass, and a dispatch of a later batch: the first batch's runs are
then pending or running under the dead leader, and only adopting them (``recover`` on a new
term) lets a standby replica, whose backend never saw them, finish them."""


@pytest.mark.parametrize("replicas", [1, 2], ids=["restart", "standby"])
@pytest.mark.parametrize("fault", FAULTS)
def test_a_kill_at_a_named_point_loses_nothing_and_runs_nothing_twice(
    db_url: str, tmp_path: Path, fault: str, replicas: int
) -> None:
    point = fault.partition("@")[0]
    store, ids, victim = setup_store(db_url, tmp_path)
    state_dir, marks = tmp_path / "runs", tmp_path / "marks"
    log = tmp_path / "replica-a.log"
    started: list[Replica] = []
    try:
        doomed = Replica(db_url, state_dir, "replica-a", log, fault)
        started.append(doomed)
        wait_until(
            lambda: not doomed.alive() or store.current_lease("scheduler") is not None,
            "replica-a to take the lease",
            30,
            0.05,
        )
        if replicas == 2:
            started.append(Replica(db_url, state_dir, "replica-b", tmp_path / "b.log", None))
        cancelled = restarted = False
        due = deadline(LIMIT)
        while True:
            states = {job_id: store.get_job(job_id).state for job_id in [victim, *ids]}
            ended = (JobState.SUCCEEDED, JobState.CANCELLED)
            if cancelled and all(state in ended for state in states.values()):
                break
            assert not due.expired(), f"stuck after a kill at {point}: {states}"
            if not cancelled and states[victim] is JobState.RUNNING:
                store.cancel(victim, "cancelled by the test")  # the during-cancel point fires
                cancelled = True
            if not doomed.alive() and replicas == 1 and not restarted:
                started.append(Replica(db_url, state_dir, "replica-a", log, None))
                restarted = True
            time.sleep(0.05)
        doomed.process.wait(timeout=limit(10))
    finally:
        for replica in started:
            replica.stop()
        kill_leftover_runs(state_dir)

    # The hook fired, at this point, and killed the process.
    assert doomed.process.returncode == -signal.SIGKILL, log.read_text()
    assert f"flotilla fault: killed at {point}" in log.read_text()
    # Every job accounted for; none ran twice.
    assert {store.get_job(job_id).state for job_id in ids} == {JobState.SUCCEEDED}
    assert store.get_job(victim).state is JobState.CANCELLED
    ran = collections.Counter(marks.read_text().split())
    assert ran == collections.Counter(f"job-{index}" for index in range(WORKLOAD)), ran
    for job_id in [*ids, victim]:
        runs = store.runs(job_id)
        assert [run for run in runs if run.state in ACTIVE_RUN_STATES] == [], runs
        assert len([run for run in runs if run.started_at is not None]) <= 1, runs
    # Resources released: no process of any run outlives it.
    assert all(process_gone(pid) for pid in read_pids(tmp_path / "victim.pid"))
    for record in run_records(state_dir):
        for replica in record.get("replicas", []):
            pid = replica.get("pid")
            assert not pid or replica.get("finished") or process_gone(pid), record
    store.close()
