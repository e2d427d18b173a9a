"""GET of one job while another client submits 10,000 jobs: does reading stay fast?

A real ``flotilla up --fleet FILE`` (SQLite, sync scheduling every 0.1 s) over one ``sim``
cluster, so the scheduler works on what is submitted (places it, follows the runs) as it
would in production. One client submits ``jobs`` jobs in batches of 1,000 (one-CPU jobs of
an hour, more than the fleet holds, so the scheduler also keeps a backlog); a second client,
on its own thread and connection, reads one job (``GET /v1/jobs/{id}``) back to back,
``pause`` seconds apart, from the first submission to the last. The same reader first runs
``idle_reads`` times against the idle server, for comparison. Latency is the client's: send
to the response's last byte.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.service import BATCH, _flotilla_up, _latency_summary
from bench.soak import FLEET


def _batch(first: int) -> list[dict[str, Any]]:
    return [
        {
            "name": f"load-{index}",
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 1}}],
            "payload": {"sim": {"duration": 3600}},
        }
        for index in range(first, first + BATCH)
    ]


def _reads(http: httpx.Client, job: str, until: threading.Event, pause: float) -> list[float]:
    seconds: list[float] = []
    while not until.is_set():
        sent = time.perf_counter()
        response = http.get(f"/v1/jobs/{job}")
        seconds.append(time.perf_counter() - sent)
        if response.status_code != 200:
            raise RuntimeError(f"GET failed: {response.status_code} {response.text[:300]}")
        time.sleep(pause)
    return seconds


def run_get_under_submit(
    jobs: int = 10_000, nodes: int = 100, pause: float = 0.01, idle_reads: int = 300
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        fleet = Path(tmp) / "fleet.yaml"
        fleet.write_text(FLEET.format(nodes=nodes))
        with _flotilla_up(Path(tmp), "--fleet", str(fleet)) as http:
            target = {**_batch(0)[0], "name": "read-me"}
            first = http.post("/v1/jobs", json={"jobs": [target]})
            if first.status_code != 201:
                raise RuntimeError(f"submit failed: {first.status_code} {first.text[:300]}")
            job = first.json()["ids"][0]
            reader = httpx.Client(base_url=http.base_url, headers=http.headers, timeout=120.0)
            done = threading.Event()
            idle = [0.0] * idle_reads
            for index in range(idle_reads):
                sent = time.perf_counter()
                reader.get(f"/v1/jobs/{job}")
                idle[index] = time.perf_counter() - sent
                time.sleep(pause)
            busy: list[float] = []
            thread = threading.Thread(
                target=lambda: busy.extend(_reads(reader, job, done, pause)), name="reader"
            )
            thread.start()
            started = time.perf_counter()
            try:
                for first_index in range(0, jobs, BATCH):
                    response = http.post("/v1/jobs", json={"jobs": _batch(first_index)})
                    if response.status_code != 201:
                        raise RuntimeError(f"submit failed: {response.text[:300]}")
            finally:
                submit_seconds = time.perf_counter() - started
                done.set()
                thread.join()
                reader.close()
    return {
        "kind": "get-under-submit",
        "params": {"jobs": jobs, "nodes": nodes, "batch": BATCH, "pause_s": pause},
        "submit_seconds": submit_seconds,
        "submit_jobs_per_s": jobs / submit_seconds,
        "get_idle": _latency_summary(idle),
        "get_under_submit": _latency_summary(busy),
    }


def get_under_submit_lines(result: dict[str, Any]) -> list[str]:
    idle, busy = result["get_idle"], result["get_under_submit"]
    return [
        f"{result.get('case', 'get-under-submit')}: GET of one job while "
        f"{result['params']['jobs']:,} jobs are submitted ({result['submit_jobs_per_s']:,.0f} "
        f"jobs/s): p50 {busy['p50_ms']:.0f} ms, p99 {busy['p99_ms']:.0f} ms, max "
        f"{busy['max_ms']:.0f} ms over {busy['count']} reads; idle p50 {idle['p50_ms']:.0f} ms, "
        f"p99 {idle['p99_ms']:.0f} ms; target {result.get('target', '')}"
    ]
