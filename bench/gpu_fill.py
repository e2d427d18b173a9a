"""GPU fill test: how much of a GPU fleet each placement rule allocates before it jams.

A synthetic cluster with a realistic mix (CPU-only nodes, nodes of 2 and of 8 GPUs) is filled
through one best-effort FIFO queue with nothing finishing: pods arrive in a fixed order
(seeded) in small batches, one scheduling round per batch, and a pod that does not fit waits
(it never fits later, since nothing is released). Pods ask for CPU and memory and for 0, a
fraction of one, 1, 2, 4 or 8 GPUs, with total GPU demand above the fleet's capacity.

Printed per profile: the GPUs left unallocated when the first pod fails (the first round
after which an arrived pod is still waiting) and at the end, the share allocated at the end,
and the decision cost (the scheduling rounds' wall time per placed pod). Every profile uses
the same per-device model (``gpu-devices``: whole devices, fractions sharing one device); only
the node choice differs:

- ``binpack``: plain bin-packing (the fullest node), the default profile before
  ``gpu-fragmentation`` joined it;
- ``first-fit``: the first node (in table order) that fits;
- ``best-fit``: the node left with the least free resources (requested resources, each as a
  share of the largest node's), a classic best fit;
- ``gpu-packing``: the fragmentation-aware score (``gpu-fragmentation``), which the
  ``default`` profile now uses;
- ``fgd``: FGD as published, over the whole trace's task types (``bench/fgd.py``).

``python3 -m uv run python -m bench.gpu_fill [--seed N] [--nodes N]`` reproduces the table.
``--trace openb`` fills instead a fleet and a trace shaped like Alibaba's public GPU-sharing
trace (``bench/openb_shape.py``: 8,152 pods on 1,523 nodes with 6,212 GPUs, 24 GPU amounts
of which 20 fractional; ``--nodes`` does not apply).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench import openb_shape
from bench.fgd import FgdScore, workload_types
from bench.generators import GI
from flotilla.framework.clusters import Cluster
from flotilla.framework.interfaces import FilterInput, ScoreInput
from flotilla.framework.jobs import SchedulingJob, build_job
from flotilla.framework.nodes import NodeTable
from flotilla.framework.registry import Framework, load_plugin, profile_plugin_names
from flotilla.framework.resources import ResourceSpace, Vector
from flotilla.model.job import JobSpec
from flotilla.model.node_info import NodeInfo
from flotilla.scheduler import RunningJob, SchedulingAlgorithm, SchedulingConfig, SchedulingSnapshot
from flotilla.scheduler.types import QueueInfo

NODE_MIX: tuple[tuple[str, float, float, int, float], ...] = (
    # name, CPU, memory GiB, GPUs, share of the nodes
    ("cpu", 64, 512, 0, 0.15),
    ("gpu2", 32, 192, 2, 0.30),
    ("gpu8", 96, 768, 8, 0.55),
)

POD_MIX: tuple[tuple[str, float, tuple[float, ...], tuple[float, ...], float], ...] = (
    # name, GPUs, CPU choices, memory GiB per CPU choices, share of the pods
    ("cpu", 0.0, (2, 4, 8, 16, 32), (4, 8), 0.45),
    ("frac-0.25", 0.25, (1, 2, 4), (4, 8), 0.08),
    ("frac-0.5", 0.5, (2, 4, 8), (4, 8), 0.08),
    ("gpu1", 1.0, (4, 8, 12), (4, 8), 0.28),
    ("gpu2", 2.0, (8, 16, 24), (4, 8), 0.10),
    ("gpu4", 4.0, (16, 32, 48), (4, 8), 0.05),
    ("gpu8", 8.0, (32, 64, 88), (4, 8), 0.03),
)

DEMAND = 1.05
"""Pods are drawn until their GPU demand reaches this share of the fleet's GPUs."""

BATCH = 25
"""Pods arriving between two scheduling rounds."""


def fleet(nodes: int, cpu_node_memory: float | None = None) -> tuple[ResourceSpace, Cluster]:
    """The fleet; ``cpu_node_memory`` (GiB) overrides the CPU-only nodes' memory."""
    space = ResourceSpace(["cpu", "memory", "gpu"])
    counts = [round(nodes * share) for *_, share in NODE_MIX]
    infos = []
    for (name, cpu, memory, gpus, _), count in zip(NODE_MIX, counts, strict=True):
        if not gpus and cpu_node_memory is not None:
            memory = cpu_node_memory
        for _ in range(count):
            infos.append(
                NodeInfo(
                    name=f"{name}-{len(infos)}",
                    capacity={"cpu": cpu, "memory": memory * GI, "gpu": float(gpus)},
                    labels={"pool": name},
                    taints=(),
                    gpu_count=gpus,
                )
            )
    # Interleaved so that "first" is not "all CPU-only nodes first" (table order = rack order).
    order = np.random.default_rng(0).permutation(len(infos)).tolist()
    table = NodeTable(space, [infos[i] for i in order])
    return space, Cluster(name="c1", order=0, labels={}, cost={}, nodes=table)


def openb_fleet() -> tuple[ResourceSpace, Cluster]:
    """The nodes of ``openb_shape``, interleaved as ``fleet``'s are."""
    space = ResourceSpace(["cpu", "memory", "gpu"])
    infos = [
        NodeInfo(
            name=f"{name}-{index}",
            capacity={"cpu": cpu, "memory": memory * GI, "gpu": float(gpus)},
            labels={"pool": name},
            taints=(),
            gpu_count=gpus,
        )
        for name, cpu, memory, gpus, count in openb_shape.NODES
        for index in range(count)
    ]
    order = np.random.default_rng(0).permutation(len(infos)).tolist()
    table = NodeTable(space, [infos[i] for i in order])
    return space, Cluster(name="c1", order=0, labels={}, cost={}, nodes=table)


def _pod(
    space: ResourceSpace, resources: dict[str, float], name: str, sequence: int
) -> SchedulingJob:
    spec = JobSpec.model_validate(
        {
            "name": name,
            "queue": "q",
            "tasks": [{"name": "main", "replicas": 1, "resources": resources}],
        }
    )
    return build_job(
        spec,
        name=f"p{sequence}",
        space=space,
        sequence=sequence,
        submit_time=float(sequence),
        priority=0,
        preemptible=False,
    )


def openb_pods(space: ResourceSpace, seed: int) -> list[SchedulingJob]:
    """The pods of ``openb_shape.trace(seed)``, in its order."""
    jobs = []
    for pod in openb_shape.trace(seed):
        resources = {"cpu": pod.cpu, "memory": pod.memory}
        if pod.gpu:
            resources["gpu"] = pod.gpu
        jobs.append(_pod(space, resources, f"gpu-{pod.gpu:g}", len(jobs)))
    return jobs


def pods(space: ResourceSpace, gpu_capacity: float, seed: int) -> list[SchedulingJob]:
    rng = np.random.default_rng(seed)
    shares = np.array([share for *_, share in POD_MIX])
    jobs: list[SchedulingJob] = []
    demand = 0.0
    while demand < DEMAND * gpu_capacity:
        name, gpu, cpus, per_cpu, _ = POD_MIX[
            int(rng.choice(len(POD_MIX), p=shares / shares.sum()))
        ]
        cpu = float(rng.choice(cpus))
        resources: dict[str, float] = {"cpu": cpu, "memory": cpu * float(rng.choice(per_cpu)) * GI}
        if gpu:
            resources["gpu"] = gpu
        spec = JobSpec.model_validate(
            {
                "name": name,
                "queue": "q",
                "tasks": [{"name": "main", "replicas": 1, "resources": resources}],
            }
        )
        jobs.append(
            build_job(
                spec,
                name=f"p{len(jobs)}",
                space=space,
                sequence=len(jobs),
                submit_time=float(len(jobs)),
                priority=0,
                preemptible=False,
            )
        )
        demand += gpu
    return jobs


class BestFitScore:
    """Least free resources left after placing: the requested resources, each as a share of
    the largest node's capacity (a bench baseline, not a plugin of Flotilla)."""

    name = "best-fit"

    def score(self, request: ScoreInput) -> Vector:
        nodes = request.cluster.nodes
        wanted = request.task.wanted
        largest = nodes.capacity.max(axis=0)
        cells = request.candidates[:, np.newaxis], wanted
        left = (nodes.free[cells] - request.task.request[wanted]) / largest[wanted]
        result: Vector = 1.0 - left.sum(axis=1) / max(len(wanted), 1)
        return result

    def row_score(self, request: FilterInput) -> Callable[[int], float]:
        """One row through ``score`` itself (a baseline: exactness over speed)."""

        def score(row: int) -> float:
            one = ScoreInput(
                request.job,
                request.task,
                request.cluster,
                np.array([row], dtype=np.intp),
                request.cycle,
            )
            return float(self.score(one)[0])

        return score


def framework_for(
    profile: str, jobs: Sequence[SchedulingJob] = (), space: ResourceSpace | None = None
) -> Framework:
    """The profile's plugins; ``fgd`` takes its workload distribution from ``jobs``."""
    if profile in ("binpack", "gpu-packing"):
        return Framework.from_profile(profile)
    names = [
        name
        for name in profile_plugin_names("binpack")
        if name not in ("binpack", "gpu-fragmentation")
    ]
    plugins: list[object] = [load_plugin(name) for name in names]
    if profile == "best-fit":
        plugins.append(BestFitScore())
    if profile == "fgd":
        space = space or ResourceSpace(["cpu", "memory", "gpu"])
        cpu, memory = space.index["cpu"], space.index["memory"]
        plugins.append(FgdScore(workload_types(jobs, cpu, memory), cpu, memory))
    return Framework(tuple(plugins))


PROFILES = ("binpack", "first-fit", "best-fit", "gpu-packing", "fgd")
"""``gpu-packing`` is the default profile's placement; ``binpack`` was, before it."""


@dataclass
class FillResult:
    profile: str
    at_90: float
    end: float
    placed: int
    pods: int
    seconds: float
    unallocated_first_failure: float
    """GPUs unallocated after the first round that left an arrived pod waiting."""
    unallocated_end: float
    decision_us: float
    """Wall time of the scheduling rounds per placed pod (µs; a loaded machine moves it)."""


def fill(
    profile: str,
    nodes: int,
    seed: int,
    cpu_node_memory: float | None = None,
    trace: str = "synthetic",
) -> FillResult:
    if trace == "openb":
        space, cluster = openb_fleet()
    else:
        space, cluster = fleet(nodes, cpu_node_memory)
    table = cluster.nodes
    gpu = space.index["gpu"]
    capacity = float(table.capacity[:, gpu].sum())
    jobs = openb_pods(space, seed) if trace == "openb" else pods(space, capacity, seed)
    algorithm = SchedulingAlgorithm(
        SchedulingConfig(), framework=framework_for(profile, jobs, space)
    )
    queues = [QueueInfo(name="q")]
    queued: dict[str, SchedulingJob] = {}
    running: list[RunningJob] = []
    demand = 0.0
    at_90: float | None = None
    first_failure: float | None = None
    deciding = 0.0
    started = time.perf_counter()
    for start in range(0, len(jobs), BATCH):
        for job in jobs[start : start + BATCH]:
            queued[job.name] = job
            demand += job.tasks[0].gpu
        snapshot = SchedulingSnapshot(
            time=float(start),
            clusters=[cluster],
            queues=queues,
            queued=list(queued.values()),
            running=running,
        )
        decision_started = time.perf_counter()
        result = algorithm.schedule(snapshot)
        deciding += time.perf_counter() - decision_started
        for scheduled in result.scheduled:
            for placement in scheduled.assignment.placements:
                table.allocate(placement.row, placement.request, placement.gpus)
            del queued[scheduled.job.name]
            running.append(RunningJob(scheduled.job, scheduled.assignment))
        if first_failure is None and queued:
            first_failure = capacity - float(table.allocated[:, gpu].sum())
        if at_90 is None and demand > 0.9 * capacity:
            at_90 = float(table.allocated[:, gpu].sum()) / capacity
    allocated = float(table.allocated[:, gpu].sum())
    end = allocated / capacity
    return FillResult(
        profile,
        at_90 if at_90 is not None else end,
        end,
        len(running),
        len(jobs),
        time.perf_counter() - started,
        first_failure if first_failure is not None else capacity - allocated,
        capacity - allocated,
        deciding / max(len(running), 1) * 1e6,
    )


def run_fill(
    nodes: int = 1_000,
    seeds: Sequence[int] = (1,),
    cpu_node_memory: float | None = None,
    trace: str = "synthetic",
    profiles: Sequence[str] = PROFILES,
) -> dict[str, Any]:
    rows = [
        fill(profile, nodes, seed, cpu_node_memory, trace) for seed in seeds for profile in profiles
    ]
    return {
        "kind": "gpu-fill",
        "trace": trace,
        "profiles": list(profiles),
        "nodes": nodes,
        "cpu_node_memory_gi": cpu_node_memory,
        "seeds": list(seeds),
        "rows": [row.__dict__ for row in rows],
    }


def render(results: dict[str, Any]) -> str:
    lines = [
        "| seed | profile | GPUs unallocated when the first pod fails | at the end "
        "| vs first-fit at the end | allocated at the end | pods placed | µs per placed pod |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    per_seed = len(results.get("profiles", PROFILES))
    rows = results["rows"]
    for index, row in enumerate(rows):
        seed = results["seeds"][index // per_seed]
        first_fit = next(
            (
                other["unallocated_end"]
                for other in rows[
                    (index // per_seed) * per_seed : (index // per_seed + 1) * per_seed
                ]
                if other["profile"] == "first-fit"
            ),
            0.0,
        )
        versus = f"{row['unallocated_end'] / first_fit - 1:+.0%}" if first_fit else "-"
        lines.append(
            f"| {seed} | {row['profile']} | {row['unallocated_first_failure']:g} "
            f"| {row['unallocated_end']:g} | {versus} | {row['end']:.1%} "
            f"| {row['placed']:,} / {row['pods']:,} | {row['decision_us']:,.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_fill", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--seed", type=int, action="append", help="repeatable (default 1)")
    parser.add_argument(
        "--cpu-node-memory", type=float, help="GiB per CPU-only node (default 512: 8 GiB/CPU)"
    )
    parser.add_argument("--trace", choices=("synthetic", "openb"), default="synthetic")
    parser.add_argument(
        "--profile", action="append", choices=PROFILES, help="repeatable (default: all)"
    )
    args = parser.parse_args(argv)
    results = run_fill(
        args.nodes, args.seed or [1], args.cpu_node_memory, args.trace, args.profile or PROFILES
    )
    print(render(results))
    options = " ".join(f"--seed {seed}" for seed in args.seed or [1])
    if args.trace != "synthetic":
        options += f" --trace {args.trace}"
    for profile in args.profile or ():
        options += f" --profile {profile}"
    if args.cpu_node_memory is not None:
        options += f" --cpu-node-memory {args.cpu_node_memory:g}"
    print(f"\nReproduce: python3 -m uv run python -m bench.gpu_fill --nodes {args.nodes} {options}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
