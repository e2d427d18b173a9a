"""Kill -9 the scheduler mid-flight and restart it: every job accounted for, none run twice.

Each job's command appends its name to a marks file, so a job that ran twice shows twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from flotilla.backends.local.backend import LocalBackend
from flotilla.model import JobSpec, QueueSpec
from flotilla.service.records import cluster_spec_from_inventory
from flotilla.store import TERMINAL_JOB_STATES, JobState, SqlStore
from tests.timing import wait_until

PROCESS = Path(__file__).with_name("loop_process.py")


def _start(url: str, state_dir: Path, replica: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, str(PROCESS), url, str(state_dir), replica],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return process


def _wait(predicate: object, limit: float) -> None:
    wait_until(predicate, "the scheduler", limit, 0.1)  # type: ignore[arg-type]


def test_kill_9_mid_flight_then_restart_runs_every_job_exactly_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'flotilla.db'}"
    state_dir = tmp_path / "runs"
    marks = tmp_path / "marks"
    store = SqlStore.open(url)
    probe = LocalBackend(cluster="local", state_dir=tmp_path / "probe")
    spec = cluster_spec_from_inventory("local", "local", probe.inventory().nodes)
    probe.close()
    store.upsert_cluster(spec)
    store.put_queue(QueueSpec(name="default"))
    command = f'echo "$FLOTILLA_JOB_NAME" >> {marks}; sleep 0.4'
    specs = [
        JobSpec.model_validate(
            {
                "name": f"job-{index}",
                "queue": "default",
                "tasks": [{"name": "main", "resources": {"cpu": 0.25}}],
                "payload": {"command": ["sh", "-c", command]},
            }
        )
        for index in range(16)
    ]
    ids = store.submit_jobs(specs)

    first = _start(url, state_dir, "replica-1")
    _wait(lambda: marks.exists() and len(marks.read_text().split()) >= 3, 30)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    states_at_kill = {store.get_job(job).state for job in ids}
    assert states_at_kill - TERMINAL_JOB_STATES, "the kill came too late to be mid-flight"

    second = _start(url, state_dir, "replica-2")
    try:
        _wait(lambda: all(store.get_job(job).state in TERMINAL_JOB_STATES for job in ids), 60)
    finally:
        second.kill()
        second.wait()
    assert {store.get_job(job).state for job in ids} == {JobState.SUCCEEDED}
    ran = marks.read_text().split()
    assert sorted(ran) == sorted(f"job-{index}" for index in range(16)), "a job ran twice or never"
    store.close()
