"""How good is the estimated start? A slice of the Philly trace replayed through a real
``flotilla up`` with ``flotilla replay`` at high speed; the service's projection runs with two
runtime estimators side by side (``--projection-runtimes max_runtime,history``).

For every job: the first estimate the service made of its start after it was submitted (read
from ``GET /v1/projection``, polled every 0.2 s), and its actual start (its run's start, from
``GET /v1/jobs``). The error of a job is ``|estimated start − actual start| / actual wait``;
jobs that did not wait (wait under one scheduling cycle) have no meaningful ratio and are
counted apart, as are jobs that never started before the replay's end and jobs that started
before any projection saw them.

The slice: ``slice_jobs`` jobs of ``philly.csv`` from row ``first_row`` (sorted by submit
time), converted as ``bench/philly.py`` does (one queue per virtual cluster, ``g`` GPUs → g
GPUs, 4g CPUs), on ``nodes`` 8-GPU nodes, with ``settings.max_time`` ending the replay.
Philly has no user estimates: each job's ``max_runtime`` is the first of the usual
wall-time limits 1 h, 4 h, 12 h, 24 h, 72 h, 7 d at or above 1.05 × its duration — a user who
picks a partition's limit, as users mostly do. Philly has no job names either: jobs are
``job-N``, so the history estimator learns per queue (virtual cluster).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.philly import read_trace, scenario_data
from bench.service import FLOTILLA, _flotilla_up, _scratch_database

LIMITS = (3600.0, 4 * 3600.0, 12 * 3600.0, 86400.0, 3 * 86400.0, 7 * 86400.0)
METHODS = ("max_runtime", "history")


def user_limit(duration: float) -> float:
    for limit in LIMITS:
        if limit >= 1.05 * duration:
            return limit
    return max(LIMITS[-1], 1.05 * duration)


def slice_scenario(
    first_row: int, slice_jobs: int, nodes: int, max_time: float, cycle_interval: float
) -> dict[str, Any]:
    rows = read_trace()[first_row : first_row + slice_jobs]
    data = scenario_data(rows, nodes=nodes, cycle_interval=cycle_interval)
    data["name"] = f"philly-accuracy-{first_row}-{slice_jobs}"
    data["settings"]["max_time"] = max_time
    for job in data["jobs"]:
        job["max_runtime"] = user_limit(job["duration"])
    return data


class Recorder:
    """Polls the projection: the first estimate of each job, per method."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http
        self.first: dict[str, dict[str, tuple[datetime | None, datetime]]] = {
            method: {} for method in METHODS
        }
        self.stop = threading.Event()
        self.polls = 0

    def run(self) -> None:
        while not self.stop.wait(0.2):
            try:
                answer = self.http.get("/v1/projection").json()
            except httpx.HTTPError:
                continue
            self.polls += 1
            if answer.get("projected_at") is None:
                continue
            at = datetime.fromisoformat(answer["projected_at"])
            for method, starts in answer["starts"].items():
                seen = self.first.setdefault(method, {})
                for job_id, start in starts.items():
                    if job_id not in seen:
                        seen[job_id] = (
                            None if start is None else datetime.fromisoformat(start),
                            at,
                        )


def _all_jobs(http: httpx.Client) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    after = None
    while True:
        params: dict[str, Any] = {"limit": 500} | ({} if after is None else {"after": after})
        page = http.get("/v1/jobs", params=params).json()
        jobs += page["jobs"]
        after = page.get("next_cursor")
        if after is None:
            return jobs


def _errors(
    jobs: list[dict[str, Any]],
    first: dict[str, tuple[datetime | None, datetime]],
    min_wait: float,
    speed: float,
) -> dict[str, Any]:
    ratios: list[float] = []
    lags: list[float] = []
    waits: list[float] = []
    signed: list[float] = []
    no_start = no_estimate = beyond = short = 0
    for job in jobs:
        run = job.get("run")
        started = run.get("started_at") if run else None
        if started is None:
            no_start += 1
            continue
        submitted = datetime.fromisoformat(job["submitted_at"])
        actual = datetime.fromisoformat(started)
        wait = (actual - submitted).total_seconds()
        if wait < min_wait:
            short += 1
            continue
        found = first.get(job["id"])
        if found is None:
            no_estimate += 1
            continue
        estimate, projected_at = found
        if estimate is None:
            beyond += 1
            continue
        ratios.append(abs((estimate - actual).total_seconds()) / wait)
        waits.append(wait * speed)
        signed.append((estimate - actual).total_seconds() * speed)
        lags.append(max(0.0, (projected_at - submitted).total_seconds()) * speed)
    ratios.sort()
    return {
        "jobs_measured": len(ratios),
        "median_abs_error_share_of_wait": statistics.median(ratios) if ratios else None,
        "p90_abs_error_share_of_wait": ratios[int(0.9 * (len(ratios) - 1))] if ratios else None,
        "within_25_percent": sum(1 for r in ratios if r <= 0.25) / len(ratios) if ratios else None,
        "not_started_by_the_end": no_start,
        "started_before_any_estimate": no_estimate,
        "waited_less_than_a_cycle": short,
        "estimate_beyond_horizon": beyond,
        "estimate_lag_scenario_s_median": statistics.median(lags) if lags else None,
        "wait_scenario_s_median": statistics.median(waits) if waits else None,
        "signed_error_scenario_s_median": statistics.median(signed) if signed else None,
        "abs_error_scenario_s_median": statistics.median(abs(e) for e in signed)
        if signed
        else None,
    }


def run_projection_accuracy(
    first_row: int = 40_000,
    slice_jobs: int = 200,
    nodes: int = 2,
    max_time: float = 6 * 3600.0,
    cycle_interval: float = 60.0,
    speed: float = 100.0,
    projection_interval: float = 1.0,
) -> dict[str, Any]:
    scenario = slice_scenario(first_row, slice_jobs, nodes, max_time, cycle_interval)
    with tempfile.TemporaryDirectory() as tmp, _scratch_database(tmp, "sqlite") as url:
        path = Path(tmp) / "slice.yaml"
        path.write_text(yaml.safe_dump(scenario))
        flags = ["--projection-interval", str(projection_interval)]
        flags += ["--projection-runtimes", ",".join(METHODS)]
        with _flotilla_up(Path(tmp), "--db", url, *flags) as http:
            recorder = Recorder(http)
            poller = threading.Thread(target=recorder.run, daemon=True)
            poller.start()
            started = time.perf_counter()
            report = Path(tmp) / "replay.json"
            command = [str(FLOTILLA), "replay", str(path), "--server", str(http.base_url)]
            done = subprocess.run(
                [*command, "--speed", f"{speed:g}", "-o", str(report)],
                capture_output=True,
                text=True,
                check=False,
            )
            wall = time.perf_counter() - started
            recorder.stop.set()
            poller.join()
            if done.returncode != 0:
                raise RuntimeError(f"flotilla replay failed: {done.stderr[-3000:]}")
            jobs = _all_jobs(http)
            replayed = json.loads(report.read_text())
    min_wait = cycle_interval / speed
    return {
        "kind": "projection-accuracy",
        "params": {
            "trace": "philly-pollux/philly.csv",
            "first_row": first_row,
            "jobs": slice_jobs,
            "nodes": nodes,
            "gpus": nodes * 8,
            "max_time_s": max_time,
            "cycle_interval_s": cycle_interval,
            "speed": speed,
            "projection_interval_wall_s": projection_interval,
        },
        "wall_s": wall,
        "polls": recorder.polls,
        "replay_states": replayed["summary"].get("states"),
        "by_method": {
            method: _errors(jobs, recorder.first.get(method, {}), min_wait, speed)
            for method in METHODS
        },
    }


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--first-row", type=int, default=40_000)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--speed", type=float, default=100.0)
    parser.add_argument("--max-time", type=float, default=6 * 3600.0)
    parser.add_argument("--projection-interval", type=float, default=1.0)
    args = parser.parse_args()
    print(
        json.dumps(
            run_projection_accuracy(
                first_row=args.first_row,
                slice_jobs=args.jobs,
                nodes=args.nodes,
                speed=args.speed,
                max_time=args.max_time,
                projection_interval=args.projection_interval,
            ),
            indent=2,
        )
    )
