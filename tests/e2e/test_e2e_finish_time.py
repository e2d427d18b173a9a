"""A run that ended while the server was down ends at the time its command exited, not at
the restart's, and ``usage`` counts only the time it ran.

Seen as a user: after a ``kill -9`` and a restart, 45 s jobs read 63 s in ``usage``: the
restarted server stamped the time it learned of the end as the run's finish.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

from tests.e2e.service import Services, job_spec, wait_for

OUTAGE = 3.0
"""Seconds the server stays down after the job ended: the gap a wrong finish time shows."""


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_run_that_ended_while_the_server_was_down_ends_at_its_exit_time(
    services: Services, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'flotilla.db'}"
    state_dir, gate = tmp_path / "runs", tmp_path / "gate"
    extra = ["--cycle-interval", "0.1", "--replica", "finish-time"]
    first = services.start(db=db, state_dir=state_dir, extra=extra)
    command = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    (job,) = first.submit(job_spec("outlives-its-server", command))
    first.wait_states([job], frozenset({"running"}), limit=120)
    run = first.job(job)["runs"][-1]
    first.kill9()

    gate.touch()  # the command exits now, with no server watching
    exit_file = state_dir / "runs" / run["id"] / "main-0.exit"
    wait_for(exit_file.exists, 60, "the supervisor to write the exit file")
    exited_by = time.time()  # the file was written before this
    time.sleep(OUTAGE)

    restarted_at = time.time()
    second = services.start(db=db, state_dir=state_dir, extra=extra)
    assert second.wait_states([job], limit=120) == {job: "succeeded"}
    ended = second.job(job)["runs"][-1]
    finished, started = seconds(ended["finished_at"]), seconds(ended["started_at"])
    assert finished <= exited_by + 0.01 < restarted_at, (ended, exited_by, restarted_at)

    usage = second.http.get("/v1/usage", params={"since": "1h", "by": "job"})
    assert usage.status_code == 200, usage.text
    (row,) = [row for row in usage.json()["rows"] if row["job"] == job]
    elapsed = row["elapsed_hours"] * 3600
    assert elapsed <= exited_by - started + 0.05, (elapsed, exited_by - started)
    assert elapsed < restarted_at - started - OUTAGE / 2  # the outage is not counted
