"""Through the service: cancel latency during a long async round, submit throughput, and
submit → scheduled throughput. Figures are measured over HTTP.

**cancel latency** (``run_cancel_latency``): a real ``flotilla up --mode async`` process (SQLite,
local cluster, ``--cycle-interval 0.1``). A backlog of ``backlog`` jobs that cannot be placed
(each asks for more CPU than the machine has, every one a different amount, so no placement
attempt is shared) keeps the async runner busy: every round scans the whole backlog and, as the
backlog never empties, the next round starts as soon as one commits. ``cancellable`` jobs
(``sleep 600``) are then scheduled and started; once all run, they are cancelled one by one:
``POST /v1/jobs/{id}/cancel``, then ``GET /v1/jobs/{id}`` every 2 ms until it shows
``cancelled`` (the loop has stopped the process group and recorded it). Also: cancelling
queued jobs (answered at once by the API). The algorithm rounds' own durations come from the
scheduling report (``algorithm_seconds`` of each committed round).

**submit → scheduled** (``run_submit_to_scheduled``): the service ``flotilla up`` runs, built by
the same composition root (``flotilla.app``) in one process — its API served by uvicorn on
127.0.0.1 and its scheduling loop (sync, 0.1 s cycles) over SQLite — with a ``sim`` cluster
(fake nodes in wall time), since ``flotilla up`` only offers the local cluster and starting
thousands of processes would measure ``fork``. Jobs are submitted over HTTP in batches;
*scheduled* means the job left ``queued`` (leased, dispatched to the sim
backend, and possibly running). Throughput is jobs / (first submit → last job scheduled).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx

from bench.cancel_trace import cancel_timelines, per_cancel, read_trace, step_summary
from flotilla.runtime import token_for
from flotilla.stage_trace import ENVIRONMENT

BATCH = 1_000
FLOTILLA = Path(sys.executable).with_name("flotilla")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait(predicate: Callable[[], bool], limit: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {limit:g}s waiting for {what}")
        time.sleep(interval)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


def _latency_summary(seconds: list[float]) -> dict[str, float]:
    return {
        "count": len(seconds),
        "p50_ms": _percentile(seconds, 0.5) * 1e3,
        "p99_ms": _percentile(seconds, 0.99) * 1e3,
        "max_ms": max(seconds) * 1e3,
        "mean_ms": statistics.fmean(seconds) * 1e3,
    }


def _submit_batches(http: httpx.Client, specs: list[dict[str, Any]]) -> tuple[list[str], float]:
    """Submit in batches of ``BATCH``; the ids and the seconds it took."""
    ids: list[str] = []
    started = time.perf_counter()
    for first in range(0, len(specs), BATCH):
        response = http.post("/v1/jobs", json={"jobs": specs[first : first + BATCH]})
        if response.status_code != 201:
            raise RuntimeError(f"submit failed: {response.status_code} {response.text[:500]}")
        ids.extend(response.json()["ids"])
    return ids, time.perf_counter() - started


def _state(http: httpx.Client, job_id: str) -> str:
    return str(http.get(f"/v1/jobs/{job_id}").json()["state"])


def _states(http: httpx.Client) -> dict[str, int]:
    counts: dict[str, int] = http.get("/v1/scheduling/report").json()["queues"].get("default", {})
    return counts


# --- cancel latency through `flotilla up --mode async` ----------------------------------------


@contextmanager
def _flotilla_up(
    workdir: Path, *extra: str, env: dict[str, str] | None = None
) -> Iterator[httpx.Client]:
    """A real ``flotilla up`` in ``workdir``; ``env``: variables added to its environment."""
    port = _free_port()
    log = (workdir / "up.log").open("wb")
    process = subprocess.Popen(
        [str(FLOTILLA), "up", "--port", str(port), "--state-dir", str(workdir / "runs"), *extra],
        cwd=workdir,
        stdout=log,
        stderr=subprocess.STDOUT,
        # The bench's PostgreSQL trusts 127.0.0.1 (as the tests' does): accept it for jobs
        # that run as uids of their own (docs/store.md, "PostgreSQL for a service").
        env={**os.environ, "FLOTILLA_ACCEPT_OPEN_DATABASE": "1", **(env or {})},
    )
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120.0)
    try:

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError((workdir / "up.log").read_text()[-3000:])
            with suppress(httpx.TransportError):
                return http.get("/readyz", timeout=2.0).status_code == 200
            return False

        _wait(ready, 120, "flotilla up to be ready", 0.1)
        # Without --auth the server writes a token for this user (docs/api.md); use it.
        _wait(lambda: token_for(str(http.base_url)) is not None, 30, "the token file", 0.1)
        http.headers["Authorization"] = f"Bearer {token_for(str(http.base_url))}"
        yield http
    finally:
        http.close()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        _kill_leftover_runs(workdir / "runs")


def _kill_leftover_runs(state_dir: Path) -> None:
    for record in state_dir.glob("runs/*/run.json"):
        with suppress(OSError, ValueError):
            for replica in json.loads(record.read_text()).get("replicas", []):
                if replica.get("pid") and not replica.get("finished"):
                    with suppress(ProcessLookupError, PermissionError):
                        os.killpg(replica["pid"], signal.SIGKILL)


def _unplaceable(index: int) -> dict[str, Any]:
    return {
        "name": f"backlog-{index}",
        "queue": "default",
        "tasks": [{"name": "main", "resources": {"cpu": 10_000 + index / 1_000}}],
        "payload": {"command": ["true"]},
        "hold_if_unfit": True,  # the server refuses a job no cluster could ever run, unless held
    }


def _cancellable(index: int) -> dict[str, Any]:
    return {
        "name": f"cancel-me-{index}",
        "queue": "default",
        "tasks": [{"name": "main", "resources": {"cpu": 0.01, "memory": "8Mi"}}],
        "payload": {"command": ["sleep", "600"]},
    }


def run_cancel_latency(
    backlog: int = 70_000,
    cancellable: int = 100,
    queued_cancels: int = 20,
    database: str = "sqlite",
    up_flags: tuple[str, ...] = (),
) -> dict[str, Any]:
    """``database``: ``sqlite`` (a file) or ``postgresql`` (a fresh database at
    ``POSTGRES_URL``); ``up_flags``: more options of ``flotilla up``."""
    with tempfile.TemporaryDirectory() as tmp, _scratch_database(tmp, database) as url:
        trace_file = Path(tmp) / "trace.jsonl"
        with _flotilla_up(
            Path(tmp),
            "--db",
            url,
            "--mode",
            "async",
            "--cycle-interval",
            "0.1",
            *up_flags,
            env={ENVIRONMENT: str(trace_file)},
        ) as http:
            result = _cancel_phases(http, backlog, cancellable, queued_cancels)
            result["params"]["database"] = database
        timelines = cancel_timelines(read_trace(trace_file), result.pop("client_times"))
    result["cancel_steps"] = step_summary(timelines)
    result["cancel_traces"] = per_cancel(timelines)
    return result


def _cancel_phases(
    http: httpx.Client, backlog: int, cancellable: int, queued_cancels: int
) -> dict[str, Any]:
    """Submit the backlog, run and cancel the cancellable jobs, then cancel queued ones."""
    backlog_ids, submit_seconds = _submit_batches(http, [_unplaceable(i) for i in range(backlog)])
    ids, _ = _submit_batches(http, [_cancellable(i) for i in range(cancellable)])

    def all_running() -> bool:
        return all(_state(http, job) == "running" for job in ids)

    _wait(all_running, 600, "the cancellable jobs to run", 0.2)
    runs: dict[int, float] = {}

    def note_runs() -> dict[str, Any]:
        """The scheduler's last cycle; empty from an API without a scheduler (``serve``)."""
        scheduler: dict[str, Any] = http.get("/v1/scheduling/report").json()["scheduler"] or {}
        if scheduler.get("algorithm_seconds") is not None:
            runs[scheduler["number"]] = scheduler["algorithm_seconds"]
        return scheduler

    latencies: list[float] = []
    client_times: dict[str, tuple[float, float]] = {}
    during_run = 0
    started = time.time()
    for job in ids:
        if note_runs().get("runner_state") in ("running", "run-requested"):
            during_run += 1
        sent, sent_at = time.perf_counter(), time.time()
        response = http.post(f"/v1/jobs/{job}/cancel", json={})
        if response.status_code != 200:
            raise RuntimeError(response.text)
        while _state(http, job) != "cancelled":
            if time.perf_counter() - sent > 60:
                raise RuntimeError(f"{job} not cancelled after 60 s")
            time.sleep(0.002)
        latencies.append(time.perf_counter() - sent)
        client_times[job] = (sent_at, time.time())
    cancel_phase = time.time() - started
    queued: list[float] = []
    for job in backlog_ids[-queued_cancels:]:
        sent = time.perf_counter()
        answer = http.post(f"/v1/jobs/{job}/cancel", json={}).json()
        queued.append(time.perf_counter() - sent)
        if answer["state"] != "cancelled":
            raise RuntimeError(f"queued job {job} answered {answer['state']}")
    # The round in flight during the cancels, and the next: their own durations.
    seen = len(runs)
    if runs:  # an API without a scheduler (``serve``) reports none
        with suppress(RuntimeError):  # a loaded machine may not finish them: report what ran
            _wait(lambda: bool(note_runs()) and len(runs) >= seen + 2, 300, "two more runs", 0.1)
    metrics = http.get("/metrics").text
    algorithm = sorted(runs.values())
    return {
        "kind": "service",
        "params": {
            "backlog": backlog,
            "cancellable": cancellable,
            "cycle_interval_s": 0.1,
            "database": "sqlite",
            "mode": "async",
        },
        "submit_jobs_per_s": backlog / submit_seconds,
        "submit_seconds": submit_seconds,
        "cancel_running": _latency_summary(latencies),
        "cancels_issued_during_a_run": during_run,
        "cancel_phase_s": cancel_phase,
        "cancel_queued": _latency_summary(queued),
        "algorithm_runs_s": algorithm,
        "algorithm_run_min_s": algorithm[0] if algorithm else None,
        "algorithm_seconds_metric": [
            line for line in metrics.splitlines() if "algorithm_seconds_sum" in line
        ],
        "client_times": client_times,
    }


# --- submit → scheduled, in one process with a sim cluster --------------------------------


POSTGRES_URL = os.environ.get(
    "FLOTILLA_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
"""The server ``--case service-throughput-postgres`` uses; it creates and drops its own
database there."""


@contextmanager
def _scratch_database(tmp: str, database: str) -> Iterator[str]:
    """A store URL: an SQLite file in ``tmp``, or a fresh PostgreSQL database dropped after."""
    if database == "sqlite":
        yield f"sqlite:///{tmp}/flotilla.db"
        return
    from sqlalchemy import create_engine, make_url

    name = f"flotilla_bench_{os.getpid()}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}"')
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def run_submit_to_scheduled(
    jobs: int = 2_000, nodes: int = 160, database: str = "sqlite"
) -> dict[str, Any]:
    """``database``: ``sqlite`` (a file) or ``postgresql`` (``POSTGRES_URL``)."""
    import uvicorn

    from flotilla.app import ApiConfig, ServiceConfig, build_service, settle_process
    from flotilla.backends.sim import SimBackend
    from flotilla.service.loop import LoopSettings

    with tempfile.TemporaryDirectory() as tmp, _scratch_database(tmp, database) as url:
        node_group = {"name": "sim", "count": nodes, "resources": {"cpu": 64, "memory": "256Gi"}}
        backend = SimBackend(cluster="sim", nodes=[node_group], default_duration=3600.0)
        port = _free_port()
        service = build_service(  # as flotilla up builds it, over a sim cluster
            ServiceConfig(
                db=url,
                loop=LoopSettings(cycle_interval=0.1, replica="bench"),
                api=ApiConfig(host="127.0.0.1", port=port),
                secret_key_file=Path(tmp) / "secret.key",
            ),
            backends={"sim": backend},
        )
        config = uvicorn.Config(service.app(), host="127.0.0.1", port=port, log_level="warning")
        server = uvicorn.Server(config)
        api = threading.Thread(target=server.run, name="bench-api")
        settle_process()  # as flotilla up does once started
        service.start()
        api.start()
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120.0)
        try:
            _wait(lambda: server.started, 60, "the API", 0.05)
            specs = [
                {
                    "name": f"sim-{index}",
                    "queue": "default",
                    "tasks": [{"name": "main", "resources": {"cpu": 1, "memory": "1Gi"}}],
                    "payload": {"sim": {"duration": 3600}},
                }
                for index in range(jobs)
            ]
            first = time.perf_counter()
            _, submit_seconds = _submit_batches(http, specs)

            def all_scheduled() -> bool:
                counts = _states(http)
                return sum(counts.values()) == jobs and not counts.get("queued")

            _wait(all_scheduled, 600, "every job to be scheduled", 0.02)
            scheduled_seconds = time.perf_counter() - first
            counts = _states(http)
        finally:
            http.close()
            server.should_exit = True
            api.join(timeout=30)
            service.stop()
            backend.close()
    return {
        "kind": "service-throughput",
        "params": {"jobs": jobs, "nodes": nodes, "batch": BATCH, "database": database},
        "submit_jobs_per_s": jobs / submit_seconds,
        "submit_seconds": submit_seconds,
        "submit_to_scheduled_jobs_per_s": jobs / scheduled_seconds,
        "submit_to_scheduled_seconds": scheduled_seconds,
        "states_at_end": counts,
    }
