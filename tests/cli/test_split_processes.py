"""API and scheduler as separate processes over one database: ``flotilla serve`` for each API,
``flotilla up --no-api`` for the scheduler and its cluster (real processes, this machine)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import httpx

from flotilla.runtime import token_for

FLOTILLA = Path(sys.executable).with_name("flotilla")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait(predicate: Callable[[], bool], what: str, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@contextmanager
def process(log: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        started = subprocess.Popen([str(FLOTILLA), *args], stdout=out, stderr=subprocess.STDOUT)
        try:
            yield started
        finally:
            if started.poll() is None:
                started.send_signal(signal.SIGTERM)
            try:
                started.wait(timeout=30)
            except subprocess.TimeoutExpired:
                started.kill()
                started.wait()


@contextmanager
def api_client(port: int, served: subprocess.Popen[bytes], log: Path) -> Iterator[httpx.Client]:
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=url, timeout=30) as http:

        def ready() -> bool:
            assert served.poll() is None, log.read_text()
            with suppress(httpx.TransportError):
                return http.get("/readyz").status_code == 200 and token_for(url) is not None
            return False

        wait(ready, f"the API on port {port}")
        http.headers["Authorization"] = f"Bearer {token_for(url)}"
        yield http


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
            process(
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
        wait(lambda: "Flotilla is up" in scheduler_log.read_text(), "the scheduler")
        assert "scheduler only, no API here" in scheduler_log.read_text()
        clients = []
        for index in range(2):
            port, log = free_port(), tmp_path / f"api-{index}.log"
            served = stack.enter_context(process(log, "serve", "--db", db, "--port", str(port)))
            clients.append(stack.enter_context(api_client(port, served, log)))

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
        assert scheduler.wait(timeout=30) == 0, scheduler_log.read_text()
