"""How soon a scheduler in another process hears of a submission (``store/wake.py``).

Real processes over one database: ``flotilla up --no-api`` (the scheduler and a ``local``
cluster) with cycles ``cycle_interval`` apart, and one ``flotilla serve``. The client submits
one small job at a time, at a random point of the cycle, and polls the job (every 5 ms) until
it is no longer ``queued``: without a wake that takes up to a cycle interval (half of one on
average); with it, the wake, one cycle and the poll.
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.service import _latency_summary, _scratch_database
from bench.split import scheduler_and_api

JOB = {
    "name": "woken",
    "queue": "default",
    "tasks": [{"name": "main", "resources": {"cpu": 0.1}}],
    "payload": {"command": ["true"]},
}


def run_split_wake(
    database: str = "sqlite", jobs: int = 20, cycle_interval: float = 5.0
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, _scratch_database(tmp, database) as url:
        work = Path(tmp)
        with scheduler_and_api(work, url, "--cycle-interval", str(cycle_interval)) as http:
            latencies = []
            randomness = random.Random(14)
            for index in range(jobs):
                time.sleep(randomness.uniform(0, cycle_interval))
                started = time.perf_counter()
                answer = http.post("/v1/jobs", json={"jobs": [{**JOB, "name": f"woken-{index}"}]})
                job_id = answer.json()["jobs"][0]["id"]
                while http.get(f"/v1/jobs/{job_id}").json()["state"] == "queued":
                    if time.perf_counter() - started > 4 * cycle_interval:
                        raise RuntimeError(f"{job_id} still queued after four cycles")
                    time.sleep(0.005)
                latencies.append(time.perf_counter() - started)
    return {
        "kind": "service-wake",
        "params": {"database": database, "jobs": jobs, "cycle_interval_s": cycle_interval},
        "submit_to_leased": _latency_summary(latencies),
    }
