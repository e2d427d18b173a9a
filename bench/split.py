"""Submit → scheduled with the API and the scheduler in separate processes over PostgreSQL.

Real processes: ``flotilla up --no-api --fleet FILE`` (the scheduler and one ``sim`` cluster of
160 × 64 CPUs, sync cycles of 0.1 s) and ``apis`` × ``flotilla serve``, all over one fresh
PostgreSQL database; with ``apis=0``, one ``flotilla up --fleet FILE`` serving the API itself,
for comparison. The client (this process) submits ``jobs`` one-CPU ``sim`` jobs in batches of
1,000 from one thread per API, each to its own API (``apis=0``: two threads to the one API),
and polls the job counts until none is queued. Submit: jobs / (first submit → last one
answered); submit → scheduled: jobs / (first submit → none queued).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx

from bench.service import BATCH, FLOTILLA, _free_port, _scratch_database, _wait
from bench.soak import FLEET
from flotilla.runtime import token_for


@contextmanager
def flotilla_process(log: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """``flotilla ARGS…`` with its output in ``log``; stopped with SIGTERM on the way out."""
    with log.open("wb") as out:
        started = subprocess.Popen([str(FLOTILLA), *args], stdout=out, stderr=subprocess.STDOUT)
        try:
            yield started
        finally:
            if started.poll() is None:
                started.send_signal(signal.SIGTERM)
            try:
                started.wait(timeout=60)
            except subprocess.TimeoutExpired:
                started.kill()
                started.wait()


@contextmanager
def scheduler_up(
    log: Path, *args: str, patience: float = 120.0
) -> Iterator[subprocess.Popen[bytes]]:
    """``flotilla up ARGS…``, once it says it is up (within ``patience`` seconds)."""
    with flotilla_process(log, "up", *args) as scheduler:

        def up() -> bool:
            if scheduler.poll() is not None:
                raise RuntimeError(log.read_text()[-3000:])
            return "Flotilla is up" in log.read_text()

        _wait(up, patience, "the scheduler", 0.1)
        yield scheduler


@contextmanager
def api_client(
    port: int, process: subprocess.Popen[bytes], log: Path, patience: float = 120.0
) -> Iterator[httpx.Client]:
    """A client of the API ``process`` serves on ``port``, once it is ready (within
    ``patience`` seconds), with its token."""
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=url, timeout=120.0) as http:

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(log.read_text()[-3000:])
            with suppress(httpx.TransportError):
                return http.get("/readyz").status_code == 200 and token_for(url) is not None
            return False

        _wait(ready, patience, f"the API on port {port}", 0.1)
        http.headers["Authorization"] = f"Bearer {token_for(url)}"
        yield http


@contextmanager
def scheduler_and_api(work: Path, url: str, *scheduler_args: str) -> Iterator[httpx.Client]:
    """``flotilla up --no-api`` (its log and runs in ``work``, with ``scheduler_args``) and one
    ``flotilla serve`` over ``url``: a client of that API."""
    with ExitStack() as stack:
        stack.enter_context(
            scheduler_up(
                work / "scheduler.log",
                "--no-api",
                "--db",
                url,
                "--port",
                str(_free_port()),
                "--state-dir",
                str(work / "runs"),
                *scheduler_args,
            )
        )
        port, log = _free_port(), work / "api.log"
        served = stack.enter_context(
            flotilla_process(log, "serve", "--db", url, "--port", str(port))
        )
        yield stack.enter_context(api_client(port, served, log))


def _specs(first: int, count: int) -> list[dict[str, Any]]:
    return [
        {
            "name": f"sim-{index}",
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 1, "memory": "1Gi"}}],
            "payload": {"sim": {"duration": 3600}},
        }
        for index in range(first, first + count)
    ]


def _submit_all(clients: list[httpx.Client], jobs: int) -> float:
    """Submit ``jobs`` split evenly over the clients, one thread each; the seconds it took."""
    errors: list[str] = []
    share = jobs // len(clients)

    def submit(client: httpx.Client, first: int) -> None:
        for start in range(first, first + share, BATCH):
            response = client.post(
                "/v1/jobs", json={"jobs": _specs(start, min(BATCH, first + share - start))}
            )
            if response.status_code != 201:
                errors.append(f"{response.status_code} {response.text[:300]}")

    threads = [
        threading.Thread(target=submit, args=(client, index * share))
        for index, client in enumerate(clients)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"submit failed: {errors[0]}")
    return time.perf_counter() - started


def run_split_throughput(
    jobs: int = 4_000, apis: int = 2, nodes: int = 160, database: str = "postgresql"
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, _scratch_database(tmp, database) as url:
        work = Path(tmp)
        fleet = work / "fleet.yaml"
        fleet.write_text(FLEET.format(nodes=nodes))
        with ExitStack() as stack:
            scheduler_log = work / "scheduler.log"
            port = _free_port()
            scheduler = stack.enter_context(
                scheduler_up(
                    scheduler_log,
                    *(["--no-api"] if apis else []),
                    "--db",
                    url,
                    "--port",
                    str(port),
                    "--fleet",
                    str(fleet),
                    "--state-dir",
                    str(work / "runs"),
                )
            )
            if apis:
                clients = []
                for index in range(apis):
                    api_port, log = _free_port(), work / f"api-{index}.log"
                    served = stack.enter_context(
                        flotilla_process(log, "serve", "--db", url, "--port", str(api_port))
                    )
                    clients.append(stack.enter_context(api_client(api_port, served, log)))
            else:
                one = stack.enter_context(api_client(port, scheduler, scheduler_log))
                clients = [one, one]
            poller = clients[0]
            first = time.perf_counter()
            submit_seconds = _submit_all(clients, jobs)

            def counts() -> dict[str, int]:
                report = poller.get("/v1/scheduling/report").json()
                found: dict[str, int] = report["queues"].get("default", {})
                return found

            def all_scheduled() -> bool:
                found = counts()
                return sum(found.values()) == jobs and not found.get("queued")

            _wait(all_scheduled, 600, "every job to be scheduled", 0.02)
            scheduled_seconds = time.perf_counter() - first
            states = counts()
    return {
        "kind": "service-throughput",
        "params": {
            "jobs": jobs,
            "apis": apis,
            "nodes": nodes,
            "batch": BATCH,
            "database": database,
            "processes": f"{apis} × flotilla serve + flotilla up --no-api"
            if apis
            else "one flotilla up (API and scheduler)",
            "load_average_after": os.getloadavg()[0],
        },
        "submit_jobs_per_s": jobs / submit_seconds,
        "submit_seconds": submit_seconds,
        "submit_to_scheduled_jobs_per_s": jobs / scheduled_seconds,
        "submit_to_scheduled_seconds": scheduled_seconds,
        "states_at_end": states,
    }
