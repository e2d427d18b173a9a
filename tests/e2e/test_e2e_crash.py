"""``kill -9`` a real ``flotilla up`` mid-flight and restart it on the same database and state
dir: every job is accounted for and none runs twice.

Each job's command appends its name to a marks file, so a job that ran twice shows twice. Jobs
left running by the killed server keep running under their supervisors; the restarted server
adopts them through the local backend's run records.
"""

from __future__ import annotations

import collections
from pathlib import Path

from flotilla.backends.local.backend import local_node
from tests.e2e.service import TERMINAL, Services, assert_started_once, job_spec, wait_for

JOBS = 12
AT_ONCE = 4
"""Jobs the local cluster runs at a time: each asks for a quarter of this machine's cores, so
the kill lands mid-flight on a 2-core runner and a 64-core one alike."""


def test_kill_9_mid_flight_then_restart_runs_every_job_once(
    services: Services, db_url: str, tmp_path: Path
) -> None:
    state_dir, marks, gate = tmp_path / "runs", tmp_path / "marks", tmp_path / "gate"
    # The same --replica id after the restart takes the lease back at once; a new id would
    # wait for the dead server's lease to expire (10 s).
    extra = ["--cycle-interval", "0.1", "--replica", "crash-test"]
    first = services.start(db=db_url, state_dir=state_dir, extra=extra)
    # Each job marks that it ran, then holds until the gate opens after the restart: the kill
    # lands mid-flight however slow the machine (with a fixed `sleep 0.3` a busy one ran all
    # twelve before the kill came).
    command = f'echo "$FLOTILLA_JOB_NAME" >> {marks}; while [ ! -e {gate} ]; do sleep 0.05; done'
    names = [f"job-{index}" for index in range(JOBS)]
    cpu = local_node().capacity["cpu"] / AT_ONCE
    ids = first.submit(*(job_spec(name, command, cpu=cpu) for name in names))

    wait_for(lambda: marks.exists() and len(marks.read_text().split()) >= 3, 60, "3 jobs to run")
    first.kill9()

    second = services.start(db=db_url, state_dir=state_dir, extra=extra)
    at_restart = {second.state(job_id) for job_id in ids}
    assert not at_restart & TERMINAL, f"a job ended before its gate opened: {at_restart}"
    gate.touch()
    assert second.wait_states(ids, limit=90) == dict.fromkeys(ids, "succeeded")

    ran = collections.Counter(marks.read_text().split())
    assert ran == collections.Counter(names), f"a job ran twice or never: {ran}"
    for job_id in ids:
        assert_started_once(second, job_id)
