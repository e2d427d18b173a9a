"""What Ctrl-C does to ``flotilla up``: by default running jobs keep running; with ``--drain``
no new job starts and the server waits for the running ones before it exits."""

from __future__ import annotations

import signal
from pathlib import Path

from sqlalchemy import create_engine, text

from tests.e2e.service import Services, job_spec, wait_for
from tests.timing import limit


def states(db_file: Path) -> dict[str, str]:
    engine = create_engine(f"sqlite:///{db_file}")
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT name, state FROM jobs")).all()
    engine.dispose()
    return {name: state for name, state in rows}


def test_ctrl_c_with_drain_waits_for_the_running_jobs_before_exiting(
    services: Services, tmp_path: Path
) -> None:
    db_file = tmp_path / "flotilla.db"
    gate = tmp_path / "gate"
    server = services.start(
        db=f"sqlite:///{db_file}",
        state_dir=tmp_path / "runs",
        extra=["--drain", "--cycle-interval", "0.1"],
    )
    [running] = server.submit(job_spec("running", f"until [ -e {gate} ]; do sleep 0.05; done"))
    wait_for(lambda: server.state(running) == "running", 60, "the job to run")
    server.process.send_signal(signal.SIGINT)
    wait_for(lambda: "waiting for 1 running job(s)" in server.output(), 60, server.output)
    assert server.alive()
    # The API keeps answering reads while it drains (it went down at the first Ctrl-C).
    assert server.state(running) == "running"
    assert server.http.get("/v1/jobs").status_code == 200
    gate.touch()
    server.process.wait(timeout=limit(60))
    assert server.process.returncode == 0, server.output()
    assert "drained: every job has ended; stopping" in server.output()
    assert states(db_file) == {"running": "succeeded"}


def test_a_second_ctrl_c_stops_a_drain_at_once_leaving_the_job_running(
    services: Services, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    db_file = tmp_path / "flotilla.db"
    server = services.start(
        db=f"sqlite:///{db_file}",
        state_dir=tmp_path / "runs",
        extra=["--drain", "--cycle-interval", "0.1"],
    )
    [running] = server.submit(job_spec("running", f"until [ -e {gate} ]; do sleep 0.05; done"))
    wait_for(lambda: server.state(running) == "running", 60, "the job to run")
    server.process.send_signal(signal.SIGINT)
    wait_for(lambda: "waiting for 1 running job(s)" in server.output(), 60, server.output)
    server.process.send_signal(signal.SIGINT)
    server.process.wait(timeout=limit(60))
    assert "stopping without waiting: 1 job(s) keep running" in server.output()
    assert states(db_file) == {"running": "running"}
    gate.touch()


def test_ctrl_c_without_drain_says_running_jobs_keep_running(
    services: Services, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    server = services.start(
        db=f"sqlite:///{tmp_path / 'flotilla.db'}",
        state_dir=tmp_path / "runs",
        extra=["--cycle-interval", "0.1"],
    )
    [running] = server.submit(job_spec("running", f"until [ -e {gate} ]; do sleep 0.05; done"))
    wait_for(lambda: server.state(running) == "running", 60, "the job to run")
    server.process.send_signal(signal.SIGINT)
    server.process.wait(timeout=limit(60))
    gate.touch()
    assert "1 running job(s) keep running and the next `flotilla up`" in server.output()
