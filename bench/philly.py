"""Replay of the Microsoft Philly trace (Pollux's processed copy) through the simulator.

Conversion (documented in docs/performance.md):

* one queue per Philly virtual cluster (15), weight 1;
* submit time = timestamp − first timestamp (seconds); duration from the trace;
* a job of ``g`` GPUs asks for ``g`` GPUs, 4 CPUs and 24 GiB per GPU. Up to 8 GPUs it is one
  replica; above 8 it is ``g/8`` replicas of 8 GPUs (``g/4`` replicas of 4 when 8 does not
  divide ``g``: the 12- and 24-GPU jobs), placed all-or-nothing;
* the fleet: one cluster of ``nodes`` × 8-GPU nodes (64 CPUs, 512 GiB). The default 64 nodes
  (512 GPUs) puts the trace's mean demand (374 busy GPUs) at 73 % of the fleet;
* ``cycle_interval`` 60 s, DRF across queues, best-effort FIFO, default plugin profile.
"""

from __future__ import annotations

import csv
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from flotilla.model import JobSpec, Scenario, SpecError, scenario_from_data
from flotilla.model.loader import check_references
from flotilla.scheduler import CycleResult, SchedulingSnapshot
from flotilla.sim import Simulator
from flotilla.sim.report import build_report

TRACE = Path("/work/shared/traces/philly-pollux/philly.csv")
GPUS_PER_NODE = 8


def read_trace(path: Path = TRACE, limit: int | None = None) -> list[dict[str, Any]]:
    rows = []
    with path.open(newline="") as handle:
        for record in csv.DictReader(handle):
            rows.append(
                {
                    "submit": datetime.fromisoformat(record["timestamp"]).timestamp(),
                    "duration": float(record["duration"]),
                    "gpus": int(record["num_gpus"]),
                    "vc": record["cluster"],
                }
            )
    rows.sort(key=lambda row: row["submit"])
    return rows[:limit] if limit is not None else rows


def _task(gpus: int) -> dict[str, Any]:
    if gpus <= GPUS_PER_NODE:
        replicas, per = 1, gpus
    elif gpus % GPUS_PER_NODE == 0:
        replicas, per = gpus // GPUS_PER_NODE, GPUS_PER_NODE
    else:
        replicas, per = gpus // 4, 4
    return {
        "name": "worker",
        "replicas": replicas,
        "resources": {"gpu": per, "cpu": 4 * per, "memory": f"{24 * per}Gi"},
    }


def scenario_data(
    rows: list[dict[str, Any]], nodes: int = 64, cycle_interval: float = 60.0
) -> dict[str, Any]:
    first = rows[0]["submit"] if rows else 0.0
    queues = sorted({row["vc"] for row in rows})
    return {
        "name": f"philly-replay-{len(rows)}",
        "description": "Philly trace (Pollux copy) replayed on a synthetic 8-GPU-node fleet",
        # cluster-only, as calibrated (one cluster; the default is resource-aware since then).
        "settings": {"cycle_interval": cycle_interval, "assignment_strategy": "cluster-only"},
        "clusters": [
            {
                "name": "philly",
                "nodes": [
                    {
                        "name": "gpu",
                        "count": nodes,
                        "resources": {"cpu": 64, "memory": "512Gi", "gpu": GPUS_PER_NODE},
                        "gpus": {"count": GPUS_PER_NODE},
                    }
                ],
            }
        ],
        "queues": [{"name": f"vc-{vc}"} for vc in queues],
        "jobs": [
            {
                "name": f"job-{index}",
                "queue": f"vc-{row['vc']}",
                "submit_at": row["submit"] - first,
                "duration": row["duration"],
                "tasks": [_task(row["gpus"])],
            }
            for index, row in enumerate(rows)
        ],
    }


def build_scenario(
    rows: list[dict[str, Any]], nodes: int = 64, cycle_interval: float = 60.0
) -> Scenario:
    """The scenario of :func:`scenario_data`, validated once per distinct job shape.

    Validating 82k job dicts through pydantic took ≈ 5 s of the replay's setup. Jobs of one
    queue and GPU count differ only in name, submit time and duration, so one ``JobSpec`` per
    (queue, GPUs) is validated and copied with those three fields. The copies share the
    template's task list, so the simulator also builds one engine shape per template. The
    three fields are checked here against the schema's constraints (the names ``job-N`` match
    the name pattern); anything outside them falls back to validating the whole document.
    """
    data = scenario_data(rows, nodes=nodes, cycle_interval=cycle_interval)
    jobs_data = data.pop("jobs")
    if any(job["submit_at"] < 0 or job["duration"] < 0 for job in jobs_data):
        return scenario_from_data({**data, "jobs": jobs_data})
    templates: dict[tuple[str, int], JobSpec] = {}
    jobs: list[JobSpec] = []
    for job, row in zip(jobs_data, rows, strict=True):
        shape = (job["queue"], row["gpus"])
        template = templates.get(shape)
        if template is None:
            template = templates[shape] = JobSpec.model_validate(job)
            jobs.append(template)
            continue
        update = {"name": job["name"], "submit_at": job["submit_at"], "duration": job["duration"]}
        jobs.append(template.model_copy(update=update))
    skeleton = scenario_from_data(data)
    scenario = skeleton.model_copy(update={"jobs": jobs})
    problems = check_references(scenario)
    if problems:
        raise SpecError(problems, None)
    return scenario


def run_philly(
    limit: int | None = None, nodes: int = 64, cycle_interval: float = 60.0, path: Path = TRACE
) -> dict[str, Any]:
    from bench.engine import peak_rss

    started = time.perf_counter()
    t0 = time.perf_counter()
    rows = read_trace(path, limit)
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    scenario = build_scenario(rows, nodes=nodes, cycle_interval=cycle_interval)
    validate_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sim = Simulator(scenario)
    setup_s = time.perf_counter() - t0
    cycle_seconds: list[float] = []
    cpu_seconds: list[float] = []
    cpu_started = time.process_time()
    inner = sim.algorithm.schedule

    def timed(snapshot: SchedulingSnapshot) -> CycleResult:
        c0, p0 = time.perf_counter(), time.process_time()
        result = inner(snapshot)
        cycle_seconds.append(time.perf_counter() - c0)
        cpu_seconds.append(time.process_time() - p0)
        return result

    sim.algorithm.schedule = timed  # type: ignore[method-assign]
    sim.run()
    t0 = time.perf_counter()
    report = build_report(sim)
    report_s = time.perf_counter() - t0
    summary = report["summary"]
    total_s = time.perf_counter() - started
    total_cpu_s = time.process_time() - cpu_started
    engine_s = sum(cycle_seconds)
    ordered = sorted(cycle_seconds)
    return {
        "kind": "simulator",
        "case": "philly" if limit is None else f"philly-{limit}",
        "description": "Philly trace replay through the simulator, end to end",
        "tags": ["philly"],
        "params": {
            "jobs": len(rows),
            "queues": len(scenario.queues),
            "nodes": nodes,
            "gpus": nodes * GPUS_PER_NODE,
            "cycle_interval": cycle_interval,
            "trace": str(path),
        },
        "read_convert_s": read_s,
        "validate_s": validate_s,
        "setup_s": setup_s,
        "simulate_s": sim.wall_seconds,
        "report_s": report_s,
        "end_to_end_s": total_s,
        "virtual_end_time_s": sim.end_time,
        "grid_cycles": sim.cycles,
        "executed_cycles": len(cycle_seconds),
        "engine_s": engine_s,
        "engine_cpu_s": sum(cpu_seconds),
        "simulate_and_report_cpu_s": total_cpu_s,
        "engine_share_of_simulate": engine_s / sim.wall_seconds if sim.wall_seconds else 0.0,
        "cycle_p50_s": _quantile(ordered, 0.50),
        "cycle_p99_s": _quantile(ordered, 0.99),
        "cycle_max_s": ordered[-1] if ordered else 0.0,
        "decisions": sim.decisions,
        "decisions_per_s": sim.decisions / engine_s if engine_s else 0.0,
        "us_per_decision": engine_s / sim.decisions * 1e6 if sim.decisions else None,
        "scheduled": summary["scheduled"],
        "states": summary["states"],
        "utilization": summary["utilization"],
        "mean_wait_s": summary["mean_wait"],
        "end_reason": summary["end_reason"],
        "peak_rss_bytes": peak_rss(),
        "wall_s": total_s,
    }


def _quantile(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
