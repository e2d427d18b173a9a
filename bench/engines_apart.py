"""``engines-apart`` (issue 36): what a black-holed and a refusing engine cost the others.

Three runs of the service as ``flotilla up`` builds it (the composition root; SQLite), each
with its loop on its thread:

* ``local``: one local cluster; jobs (``true``) submitted one at a time, each woken as the
  API wakes the loop; submit → running per job, and every cycle's length.
* ``local+dead``: the same, beside a black-holed cluster (accepts a TCP connection, never
  answers) and a refusing one (a closed port), both known from before with one 64-CPU node
  and left ``unreachable`` as ``connect`` leaves them at start. Their backend waits
  ``REMOTE_TIMEOUT`` for an answer, as a remote backend's client does.
* ``idle``: no reachable cluster (a fleet's one cluster, refusing, never gave its nodes) and one
  job queued: the process's CPU time over ``IDLE_SECONDS`` as % of a core, and its log lines.

Targets (issue 36): p99 of ``local+dead`` within 1.5× of ``local``; no cycle longer than 2×
the interval; idle < 5 % of a core and a bounded number of log lines.
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.dead_engines import (
    BlackHole,
    RemoteBackend,
    declare_clusters,
    refusing_address,
    remote_cluster_spec,
)
from flotilla.app import ServiceConfig, build_service
from flotilla.app.clusters import register_clusters
from flotilla.backends import Backend
from flotilla.backends.local.backend import LocalBackend
from flotilla.model import JobSpec
from flotilla.service.loop import LoopSettings
from flotilla.store import JobState

INTERVAL = 0.5
"""The cycle interval of every run (seconds)."""

JOBS = 15
REMOTE_TIMEOUT = 4.0
IDLE_SECONDS = 20.0


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines = 0
        self.tracebacks = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.lines += 1
        self.tracebacks += record.exc_info is not None


def _job(name: str, command: str = "true", cpu: float = 0.1) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": name,
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": cpu}}],
            "payload": {"command": ["sh", "-c", command]},
        }
    )


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _latency(root: Path, dead: dict[str, tuple[str, int]]) -> dict[str, Any]:
    """Submit → running of ``JOBS`` local jobs, one at a time, beside ``dead`` clusters."""
    local = LocalBackend(cluster="local", state_dir=root / "runs", stop_runs_on_close=True)
    backends: dict[str, Backend] = {"local": local}
    for name, address in dead.items():
        backends[name] = RemoteBackend(name, address, timeout=REMOTE_TIMEOUT)
    config = ServiceConfig(
        db=f"sqlite:///{root / 'flotilla.db'}",
        loop=LoopSettings(cycle_interval=INTERVAL, heartbeat_timeout=3600),
        secret_key_file=root / "secret.key",
    )
    service = build_service(config, backends=backends, register_clusters=False)
    store, loop = service.store, service.loop
    register_clusters(store, {"local": local})
    for name in dead:
        store.upsert_cluster(remote_cluster_spec(name))
        store.set_cluster_state(name, "unreachable", reason="its backend did not answer")
    counted = _Count()
    logging.getLogger("flotilla").addHandler(counted)
    cycles: dict[int, float] = {}
    waits: list[float] = []
    try:
        service.start()
        for index in range(JOBS):
            sent = time.perf_counter()
            job = store.submit_jobs([_job(f"hello-{index}")])[0]
            loop.wake()
            while store.get_job(job).state not in (JobState.RUNNING, JobState.SUCCEEDED):
                report = loop.last_cycle()
                cycles[report.number] = report.seconds
                if time.perf_counter() - sent > 120:
                    raise RuntimeError(f"job {index} not running after 120 s")
                time.sleep(0.005)
            waits.append(time.perf_counter() - sent)
        report = loop.last_cycle()
        cycles[report.number] = report.seconds
    finally:
        logging.getLogger("flotilla").removeHandler(counted)
        service.stop()
        local.close()
    longest = max(cycles.values())
    return {
        "submit_to_running_p50_s": round(statistics.median(waits), 3),
        "submit_to_running_p99_s": round(_percentile(waits, 0.99), 3),
        "longest_cycle_s": round(longest, 3),
        "longest_cycle_over_interval": round(longest / INTERVAL, 2),
        "cycles_seen": len(cycles),
        "log_lines": counted.lines,
        "tracebacks": counted.tracebacks,
    }


def _idle(root: Path, refused: tuple[str, int]) -> dict[str, Any]:
    """No reachable cluster, one job queued: CPU % of a core and log lines over the window."""
    config = ServiceConfig(
        db=f"sqlite:///{root / 'flotilla.db'}",
        loop=LoopSettings(cycle_interval=INTERVAL),
        secret_key_file=root / "secret.key",
    )
    backends: dict[str, Backend] = {
        "slurm": RemoteBackend("slurm", refused, timeout=REMOTE_TIMEOUT)
    }
    service = build_service(config, backends=backends, register_clusters=False)
    declare_clusters(service.store, {"slurm": "slurm"})  # declared, never answered
    service.store.submit_jobs([_job("waits", cpu=1)])
    counted = _Count()
    logging.getLogger("flotilla").addHandler(counted)
    try:
        service.start()
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(IDLE_SECONDS)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        cycles = service.loop.last_cycle().number
    finally:
        logging.getLogger("flotilla").removeHandler(counted)
        service.stop()
    return {
        "window_s": round(wall, 1),
        "cpu_percent_of_a_core": round(100 * cpu / wall, 2),
        "cycles": cycles,
        "log_lines": counted.lines,
        "tracebacks": counted.tracebacks,
    }


def run_engines_apart() -> dict[str, Any]:
    logging.getLogger("flotilla").setLevel(logging.INFO)
    results: dict[str, Any] = {"interval_s": INTERVAL, "jobs": JOBS, "load_1m": os.getloadavg()[0]}
    with BlackHole() as hole, refusing_address() as refused:
        with tempfile.TemporaryDirectory() as root:
            results["local"] = _latency(Path(root), {})
        with tempfile.TemporaryDirectory() as root:
            results["local+dead"] = _latency(Path(root), {"ray": hole.address, "slurm": refused})
        with tempfile.TemporaryDirectory() as root:
            results["idle"] = _idle(Path(root), refused)
    alone = results["local"]["submit_to_running_p99_s"]
    beside = results["local+dead"]["submit_to_running_p99_s"]
    results["p99_ratio"] = round(beside / alone, 2) if alone else None
    results["load_1m_end"] = os.getloadavg()[0]
    return results
