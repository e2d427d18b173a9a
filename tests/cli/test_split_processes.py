"""API and scheduler as separate processes over one database: ``flotilla serve`` for each API,
``flotilla up --no-api`` for the scheduler and its cluster (real processes, this machine)."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from bench.split import api_client, flotilla_process, scheduler_up

from tests.timing import limit, wait_until


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait(predicate: Callable[[], bool], what: str, limit: float = 60) -> None:
    wait_until(predicate, what, limit, 0.05)


def job(name: str) -> dict[str, object]:
    return {
        "name": name,
        "queue": "default",
        "tasks": [{"name": "main", "resources": {"cpu": 0.1}}],
        "payload": {"command": ["true"]},
    }


def test_two_api_processes_and_a_scheduler_only_process_share_one_database(
    tmp_path: Path,
) -> None:
    db = f"sqlite:///{tmp_path / 'flotilla.db'}"
    unused = free_port()
    with ExitStack() as stack:
        scheduler_log = tmp_path / "scheduler.log"
        scheduler = stack.enter_context(
            flotilla_process(
                scheduler_log,
                "up",
                "--no-api",
                "--db",
                db,
                "--port",
                str(unused),
                "--state-dir",
                str(tmp_path / "runs"),
                "--cycle-interval",
                "0.1",
            )
        )
        # The three processes start side by side (each pays its imports), then are waited for.
        apis = []
        for index in range(2):
            port, log = free_port(), tmp_path / f"api-{index}.log"
            served = stack.enter_context(
                flotilla_process(log, "serve", "--db", db, "--port", str(port))
            )
            apis.append((port, served, log))
        wait(lambda: "Flotilla is up" in scheduler_log.read_text(), "the scheduler")
        assert "scheduler only, no API here" in scheduler_log.read_text()
        clients = [
            stack.enter_context(api_client(port, served, log, patience=limit(120)))
            for port, served, log in apis
        ]

        ids = [
            client.post("/v1/jobs", json={"jobs": [job(f"through-{index}")]}).json()["jobs"][0][
                "id"
            ]
            for index, client in enumerate(clients)
        ]

        def succeeded() -> bool:
            """Each API reads the job the other one took, as the scheduler ran it."""
            states = [
                clients[1 - i].get(f"/v1/jobs/{job_id}").json()["state"]
                for i, job_id in enumerate(ids)
            ]
            assert scheduler.poll() is None, scheduler_log.read_text()
            return states == ["succeeded", "succeeded"]

        wait(succeeded, "both jobs to succeed")
        with socket.socket() as probe:  # the scheduler serves nothing, not even on --port
            assert probe.connect_ex(("127.0.0.1", unused)) != 0
        scheduler.send_signal(signal.SIGTERM)
        assert scheduler.wait(timeout=limit(30)) == 0, scheduler_log.read_text()


def test_a_scheduler_only_process_is_woken_by_another_process_s_submit_and_cancel(
    tmp_path: Path, db_url: str
) -> None:
    """``flotilla up --no-api`` hears what ``flotilla serve`` committed (``store/wake.py``:
    PostgreSQL's ``NOTIFY``, a socket beside a SQLite file): with cycles a minute apart, a
    submitted job is scheduled and its cancel takes effect long before the next cycle would
    have found them."""
    db = db_url
    with ExitStack() as stack:
        scheduler_log = tmp_path / "scheduler.log"
        # Both processes start side by side; the job is submitted once both are up.
        port, log = free_port(), tmp_path / "api.log"
        served = stack.enter_context(
            flotilla_process(log, "serve", "--db", db, "--port", str(port))
        )
        stack.enter_context(
            scheduler_up(
                scheduler_log,
                "--no-api",
                "--db",
                db,
                "--port",
                str(free_port()),
                "--state-dir",
                str(tmp_path / "runs"),
                "--cycle-interval",
                "60",
                "--lease-ttl",
                "600",
                "--accept-open-database",  # the tests' trusting PostgreSQL, jobs as other uids
                patience=limit(120),
            )
        )
        client = stack.enter_context(api_client(port, served, log, patience=limit(120)))
        sleeper = {**job("sleeper"), "payload": {"command": ["sleep", "600"]}}
        job_id = client.post("/v1/jobs", json={"jobs": [sleeper]}).json()["jobs"][0]["id"]

        def state() -> str:
            return str(client.get(f"/v1/jobs/{job_id}").json()["state"])

        started = ("leased", "pending", "running")
        wait(lambda: state() in started, "the job to be scheduled (woken by the submission)", 30)
        assert client.post(f"/v1/jobs/{job_id}/cancel", json={}).status_code < 300
        wait(lambda: state() == "cancelled", "the cancel to take effect (woken by it)", 30)
