"""Soak: does a real ``flotilla up`` keep a flat memory while jobs keep coming and finishing?

A real ``flotilla up --fleet FILE`` (SQLite, sync scheduling every 0.1 s) over one ``sim``
cluster (fake nodes in wall time: thousands of real processes would measure ``fork``), with a
short ``--finished-retention``. The client submits jobs in batches of 1,000 that each run
``duration`` seconds, keeping at most ``in_flight`` unfinished, until ``jobs`` have finished.
Every ``sample_every`` seconds it records the server's resident memory (``VmRSS`` of its
process) beside the jobs submitted and finished so far. *Flat* is judged after the warm-up
(the first ``warmup_share`` of the finished jobs): the spread (max − min) of the RSS samples
against their median.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.service import BATCH, _flotilla_up
from flotilla.runtime import server_file

FLEET = """\
name: soak
settings: {{cycle_interval: 0.1, mode: sync}}
clusters:
  - name: sim
    backend: sim
    nodes:
      - {{name: n, count: {nodes}, resources: {{cpu: 64, memory: 256Gi}}}}
queues:
  - {{name: default}}
"""


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def _counts(http: httpx.Client) -> dict[str, int]:
    counts: dict[str, int] = http.get("/v1/scheduling/report").json()["queues"].get("default", {})
    return counts


def _batch(first: int, duration: float) -> list[dict[str, Any]]:
    return [
        {
            "name": f"soak-{index}",
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 1}}],
            "payload": {"sim": {"duration": duration}},
        }
        for index in range(first, first + BATCH)
    ]


FINISHED = ("succeeded", "failed", "cancelled")


def run_soak(
    jobs: int = 200_000,
    in_flight: int = 5_000,
    duration: float = 0.2,
    retention: float = 10.0,
    nodes: int = 100,
    sample_every: float = 2.0,
    warmup_share: float = 0.2,
) -> dict[str, Any]:
    samples: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        fleet = Path(tmp) / "fleet.yaml"
        fleet.write_text(FLEET.format(nodes=nodes))
        with _flotilla_up(
            Path(tmp), "--fleet", str(fleet), "--finished-retention", str(retention)
        ) as http:
            port = httpx.URL(str(http.base_url)).port
            pid = int(json.loads(server_file(port or 0).read_text())["pid"])
            submitted = finished = 0
            started = last_sample = time.monotonic()
            while finished < jobs:
                counts = _counts(http)
                finished = sum(counts.get(state, 0) for state in FINISHED)
                if submitted < jobs and submitted - finished + BATCH <= in_flight:
                    response = http.post("/v1/jobs", json={"jobs": _batch(submitted, duration)})
                    if response.status_code != 201:
                        raise RuntimeError(f"submit failed: {response.text[:300]}")
                    submitted += BATCH
                else:
                    time.sleep(0.2)
                now = time.monotonic()
                if now - last_sample >= sample_every or finished >= jobs:
                    last_sample = now
                    samples.append(
                        {
                            "t_s": round(now - started, 1),
                            "submitted": submitted,
                            "finished": finished,
                            "rss_mib": round(_rss_mib(pid), 1),
                        }
                    )
            seconds = time.monotonic() - started
    after = [s["rss_mib"] for s in samples if s["finished"] >= warmup_share * jobs]
    median = statistics.median(after) if after else 0.0
    return {
        "kind": "soak",
        "params": {
            "jobs": jobs,
            "in_flight": in_flight,
            "duration_s": duration,
            "finished_retention_s": retention,
            "nodes": nodes,
            "warmup_share": warmup_share,
        },
        "seconds": seconds,
        "jobs_per_s": jobs / seconds,
        "rss_after_warmup_mib": {
            "min": min(after, default=0.0),
            "median": median,
            "max": max(after, default=0.0),
            "spread_share": (max(after) - min(after)) / median if after else None,
            "deviation_share": max(abs(x - median) for x in after) / median if after else None,
        },
        "samples": samples,
    }


def soak_lines(result: dict[str, Any]) -> list[str]:
    rss = result["rss_after_warmup_mib"]
    spread = rss["spread_share"]
    return [
        f"{result.get('case', 'soak')}: {result['params']['jobs']:,} jobs submitted and finished "
        f"in {result['seconds']:.0f} s ({result['jobs_per_s']:,.0f} jobs/s); server RSS after "
        f"warm-up min {rss['min']:.0f} / median {rss['median']:.0f} / max {rss['max']:.0f} MiB"
        + (f" (spread {spread:.1%} of the median" if spread is not None else "")
        + (f"; all within ±{rss['deviation_share']:.1%} of it)" if spread is not None else "")
    ]
