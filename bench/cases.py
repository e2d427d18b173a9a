"""The benchmark cases. ``quick`` ones form the default suite; ``--full`` adds the rest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from bench.engine import EngineCase, run_engine_case
from bench.generators import (
    GPU_NODE,
    MULTI_REPLICA_MIX,
    OVERSIZED,
    FleetParams,
    WorkloadParams,
)


@dataclass(frozen=True)
class Case:
    name: str
    description: str
    quick: bool
    run: Callable[[], dict[str, Any]]
    target: str = ""


def _engine(case: EngineCase, target: str = "", quick: bool = True) -> Case:
    return Case(case.name, case.description, quick, lambda: run_engine_case(case), target)


HEADLINE = EngineCase(
    name="headline-5k",
    description=(
        "5,000 nodes (80% 64-CPU, 20% 8-GPU tainted), 100 queues (weights 1-2), DRF, single-task "
        "jobs of 8 shapes, 2 priorities; 50k-job backlog fills the fleet from empty, then 5% churn "
        "per cycle. Quota tree (org → divisions → teams) enforced."
    ),
    fleet=FleetParams(nodes=5_000),
    workload=WorkloadParams(jobs=50_000, queues=100, weight_skew=2.0, quota_tree=True),
    cycles=6,
    churn=0.05,
    budget_s=120,
    tags=("headline",),
)

NODES_15K = EngineCase(
    name="nodes-15k",
    description=(
        "15,000 nodes, same mix as headline-5k; fleet prefilled to 90% by the harness, so the "
        "engine places the last 10% from a 40k-job backlog, then 5% churn per cycle."
    ),
    fleet=FleetParams(nodes=15_000),
    workload=WorkloadParams(jobs=40_000, queues=100, weight_skew=2.0, quota_tree=True),
    cycles=3,
    churn=0.05,
    prefill=0.9,
    budget_s=120,
    tags=("headline",),
)


def _node_scaling(nodes: int) -> EngineCase:
    return EngineCase(
        name=f"scale-nodes-{nodes // 1000}k",
        description=f"{nodes:,} nodes, 100 queues, 3,000 single-task jobs, one cycle from empty",
        fleet=FleetParams(nodes=nodes),
        workload=WorkloadParams(jobs=3_000, queues=100, weight_skew=2.0),
        cycles=1,
        churn=0.0,
        budget_s=60,
        tags=("scale-nodes",),
    )


def _unschedulable(jobs: int) -> EngineCase:
    return EngineCase(
        name=f"unschedulable-{_short(jobs)}",
        description=(
            f"{jobs:,} identical queued jobs larger than any node, 1,000 nodes, 100 queues: "
            "a cycle that can schedule nothing"
        ),
        fleet=FleetParams(nodes=1_000),
        workload=WorkloadParams(jobs=jobs, queues=100, shapes=(OVERSIZED,), priorities=(0,)),
        cycles=2,
        churn=0.0,
        budget_s=120,
        tags=("scale-jobs",),
    )


def _queued_scaling(jobs: int) -> EngineCase:
    return EngineCase(
        name=f"scale-queued-{_short(jobs)}",
        description=(
            f"5,000 nodes prefilled to 95%, {jobs:,} queued single-task jobs of 8 shapes, "
            "100 queues; 3 cycles with 1% churn (mostly rescanning the backlog)"
        ),
        fleet=FleetParams(nodes=5_000),
        workload=WorkloadParams(jobs=jobs, queues=100, weight_skew=2.0),
        cycles=3,
        churn=0.01,
        prefill=0.95,
        budget_s=240,
        tags=("scale-jobs",),
    )


def _short(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1_000}k"


MULTI_REPLICA = EngineCase(
    name="multi-replica-1k",
    description=(
        "1,000 8-GPU nodes, 20 queues, all-or-nothing jobs of 2-8 replicas (1-8 GPUs each); "
        "5k-job backlog fills the fleet, then 5% churn"
    ),
    fleet=FleetParams(nodes=1_000, shapes=(replace(GPU_NODE, weight=1.0),)),
    workload=WorkloadParams(jobs=5_000, queues=20, shapes=MULTI_REPLICA_MIX),
    cycles=5,
    churn=0.05,
    budget_s=90,
    tags=("multi-replica",),
)

TINY = EngineCase(
    name="tiny",
    description="Smoke case: 40 nodes, 4 queues, 300 jobs, 3 cycles",
    fleet=FleetParams(nodes=40, clusters=2),
    workload=WorkloadParams(jobs=300, queues=4, quota_tree=True),
    cycles=3,
    churn=0.2,
    prefill=0.3,
    budget_s=30,
    tags=("smoke",),
)


def _philly(limit: int | None = None) -> Case:
    def run() -> dict[str, Any]:
        from bench.philly import run_philly

        return run_philly(limit=limit)

    name = "philly" if limit is None else f"philly-{_short(limit)}"
    jobs = "82,247" if limit is None else f"the first {limit:,}"
    return Case(
        name,
        f"Philly trace, {jobs} jobs, through the simulator end to end (512 GPUs, 60 s cycles)",
        quick=limit is not None,
        run=run,
        target="≤ 60 s end to end" if limit is None else "",
    )


def _service_cancel(database: str = "sqlite") -> Case:
    def run() -> dict[str, Any]:
        from bench.service import run_cancel_latency

        return run_cancel_latency(database=database)

    suffix, where = ("", "SQLite") if database == "sqlite" else ("-postgres", "PostgreSQL")
    return Case(
        f"service-cancel{suffix}",
        f"flotilla up --mode async ({where}): 70,000 unplaceable jobs keep ≥ 5 s rounds in flight; "
        "100 running jobs cancelled one by one over HTTP (so p99 is not just the maximum), then "
        "20 queued ones; submit of the "
        "backlog in batches of 1,000",
        quick=False,
        run=run,
        target="cancel p99 ≤ 100 ms; submit ≥ 2,000 jobs/s",
    )


def _service_cancel_split(database: str = "postgresql") -> Case:
    def run() -> dict[str, Any]:
        from bench.split_cancel import run_split_cancel

        return run_split_cancel(database=database)

    suffix, where = ("postgres", "PostgreSQL") if database == "postgresql" else ("sqlite", "SQLite")
    return Case(
        f"service-cancel-split-{suffix}",
        "service-cancel with the API and the scheduler in separate processes (flotilla serve + "
        f"flotilla up --no-api --mode async) over {where}",
        quick=False,
        run=run,
        target="cancel p99 ≤ 100 ms",
    )


def _service_throughput(database: str = "sqlite") -> Case:
    def run() -> dict[str, Any]:
        from bench.service import run_submit_to_scheduled

        return run_submit_to_scheduled(database=database)

    suffix, where = ("", "SQLite") if database == "sqlite" else ("-postgres", "PostgreSQL")
    return Case(
        f"service-throughput{suffix}",
        f"API (uvicorn) + SchedulingLoop (sync, 0.1 s) over {where} with a sim cluster of 160 "
        "64-CPU nodes: submit 2,000 one-CPU jobs over HTTP in batches of 1,000 and wait until "
        "none is queued",
        quick=False,
        run=run,
        target="submit ≥ 2,000 jobs/s; submit → scheduled ≥ 1,000 jobs/s",
    )


def _service_wake(database: str) -> Case:
    def run() -> dict[str, Any]:
        from bench.split_wake import run_split_wake

        return run_split_wake(database=database)

    suffix, where = ("postgres", "PostgreSQL") if database == "postgresql" else ("sqlite", "SQLite")
    return Case(
        f"service-wake-split-{suffix}",
        "flotilla serve + flotilla up --no-api (cycles 5 s apart) over "
        f"{where}: one job submitted at a random point of the cycle, until it is not queued",
        quick=False,
        run=run,
        target="well under the cycle interval (the wake, not the next cycle)",
    )


def _service_split(apis: int, database: str = "postgresql") -> Case:
    def run() -> dict[str, Any]:
        from bench.split import run_split_throughput

        return run_split_throughput(apis=apis, database=database)

    where = (
        f"{apis} × flotilla serve + flotilla up --no-api (the scheduler)"
        if apis
        else "one flotilla up serving the API and scheduling"
    )
    prefix, over = (
        ("service-throughput-postgres", "PostgreSQL")
        if database == "postgresql"
        else ("service-throughput-sqlite", "SQLite")
    )
    return Case(
        f"{prefix}-{apis}api" if apis else f"{prefix}-1process",
        f"real processes over {over}, {where}; one sim cluster of 160 64-CPU nodes, sync "
        "0.1 s: submit 4,000 one-CPU jobs over HTTP in batches of 1,000 from one client thread "
        "per API (two to the one process) and wait until none is queued",
        quick=False,
        run=run,
        target="submit → scheduled ≥ 2,000 jobs/s",
    )


def _service_soak(jobs: int) -> Case:
    def run() -> dict[str, Any]:
        from bench.soak import run_soak

        return run_soak(jobs=jobs)

    return Case(
        "service-soak" if jobs >= 200_000 else f"service-soak-{_short(jobs)}",
        f"flotilla up --fleet (one sim cluster of 100 × 64 CPUs, SQLite, sync 0.1 s, "
        f"--finished-retention 10): {jobs:,} jobs of 0.2 s submitted in batches of 1,000, at "
        "most 5,000 unfinished; the server's RSS sampled every 2 s",
        quick=False,
        run=run,
        target="RSS flat (± 10 %) after the first 20 % of the jobs",
    )


def _service_get_under_submit() -> Case:
    def run() -> dict[str, Any]:
        from bench.get_under_submit import run_get_under_submit

        return run_get_under_submit()

    return Case(
        "service-get-under-submit",
        "flotilla up --fleet (one sim cluster of 100 × 64 CPUs, SQLite, sync 0.1 s): one client "
        "submits 10,000 one-CPU jobs in batches of 1,000 while another reads one job back to "
        "back (GET, 10 ms apart); the same reads on the idle server first",
        quick=False,
        run=run,
        target="GET p99 ≤ 50 ms under submit",
    )


def _gpu_fill() -> Case:
    def run() -> dict[str, Any]:
        from bench.gpu_fill import run_fill

        return run_fill(nodes=1_000, seeds=(1, 2, 3))

    return Case(
        "gpu-fill",
        "GPU fill test: 1,000 nodes (CPU-only, 2- and 8-GPU), pods of 0, fractional, 1, 2, 4, 8 "
        "GPUs through one FIFO queue with nothing finishing (3 seeds); GPU allocation ratio at "
        "90 % demand and at the end, unallocated GPUs when the first pod fails and at the end, "
        "for binpack, first-fit, best-fit, gpu-packing and the FGD baseline",
        quick=False,
        run=run,
        target="gpu-packing: at least 40 % fewer unallocated GPUs than first-fit at the end",
    )


def _engines_apart() -> Case:
    def run() -> dict[str, Any]:
        from bench.engines_apart import run_engines_apart

        return run_engines_apart()

    return Case(
        "engines-apart",
        "flotilla up (SQLite, 0.5 s cycles): local submit → running of 15 jobs one at a time, "
        "alone and beside a black-holed and a refusing cluster (4 s client timeout), the "
        "longest cycle; then no reachable cluster with one job queued for 20 s: CPU and log "
        "lines",
        quick=False,
        run=run,
        target="p99 ≤ 1.5× alone; longest cycle ≤ 2× interval; idle < 5 % of a core",
    )


CASES: dict[str, Case] = {
    case.name: case
    for case in (
        _engine(HEADLINE, "≥ 50,000 placements/s (≈ 20 µs/decision)"),
        _engine(NODES_15K, "≥ 10,000 placements/s"),
        _engine(_node_scaling(1_000)),
        _engine(_node_scaling(5_000)),
        _engine(_node_scaling(15_000)),
        _engine(_unschedulable(10_000)),
        _engine(_unschedulable(100_000)),
        _engine(_unschedulable(1_000_000), "≤ 1 GiB held; cycle ≤ 1 s"),
        _engine(_queued_scaling(10_000)),
        _engine(_queued_scaling(100_000)),
        _engine(_queued_scaling(1_000_000), quick=False),
        _engine(MULTI_REPLICA),
        _philly(10_000),
        _philly(),
        _engine(TINY, quick=False),
        _service_cancel(),
        _service_cancel("postgresql"),
        _service_cancel_split(),
        _service_cancel_split("sqlite"),
        _service_wake("sqlite"),
        _service_wake("postgresql"),
        _service_throughput(),
        _service_throughput("postgresql"),
        _service_split(2),
        _service_split(0),
        _service_split(2, "sqlite"),
        _service_split(0, "sqlite"),
        _service_soak(200_000),
        _service_soak(20_000),
        _service_get_under_submit(),
        _gpu_fill(),
        _engines_apart(),
    )
}
ENGINE_CASES: dict[str, EngineCase] = {
    c.name: c
    for c in (
        HEADLINE,
        NODES_15K,
        MULTI_REPLICA,
        TINY,
        *(_node_scaling(n) for n in (1_000, 5_000, 15_000)),
        *(_unschedulable(n) for n in (10_000, 100_000, 1_000_000)),
        *(_queued_scaling(n) for n in (10_000, 100_000, 1_000_000)),
    )
}


def quick_suite() -> list[str]:
    return [name for name, case in CASES.items() if case.quick]


def full_suite() -> list[str]:
    return [name for name in CASES if name != "tiny"]
