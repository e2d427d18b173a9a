"""Builders that make a test read like the rule it checks.

Everything here produces plain scenario data (the dicts a YAML file would hold) so that every
test goes through the same validation as a user's file (``scenario_from_data``)::

    data = scenario(
        clusters=[cluster("east", nodes(4, cpu=32, memory="128Gi", gpu=8))],
        queues=["a", queue("b", weight=3)],
        jobs=[jobs(queue="a", n=16, cpu=1), job("big", queue="b", cpu=64)],
    )
    report = simulate_report(data)
    assert report.job("big").state == "queued"
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flotilla.framework.clusters import Cluster
from flotilla.framework.fleet import build_cluster
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.resources import ResourceSpace
from flotilla.model import Scenario, scenario_from_data
from flotilla.sim import SimulationOptions, Simulator, simulate
from flotilla.sim.fleet import build_jobs, resource_space
from flotilla.sim.report import build_report, check_expectations

Data = dict[str, Any]

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT / ".." / "shared"
"""The shared contract and scenarios live beside the repository (CI clones them there)."""

TaintLike = str | Mapping[str, str]


def taint(text: str) -> Data:
    """``"key=value:Effect"``, ``"key:Effect"`` or ``"key=value"`` (effect NoSchedule)."""
    spec, _, effect = text.partition(":")
    key, _, value = spec.partition("=")
    result: Data = {"key": key, "value": value}
    if effect:
        result["effect"] = effect
    return result


def toleration(
    key: str = "",
    value: str | None = None,
    *,
    operator: str | None = None,
    effect: str | None = None,
) -> Data:
    result: Data = {"key": key}
    if operator is not None:
        result["operator"] = operator
    if value is not None:
        result["value"] = value
    if effect is not None:
        result["effect"] = effect
    return result


def resources(
    cpu: float | str | None = None,
    memory: float | str | None = None,
    gpu: float | None = None,
    **extended: float | str,
) -> Data:
    result: Data = {}
    for name, amount in (("cpu", cpu), ("memory", memory), ("gpu", gpu)):
        if amount is not None:
            result[name] = amount
    result.update(extended)
    return result


def nodes(
    count: int | None = None,
    *,
    name: str = "n",
    cpu: float | str = 8,
    memory: float | str | None = None,
    gpu: int | None = None,
    gpu_memory: str | None = None,
    numa_nodes: int | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[TaintLike] = (),
    **extended: float | str,
) -> Data:
    """A node group: ``count`` alike nodes ``name-0 …`` (or exactly ``name`` without count).

    ``gpu`` declares a device inventory of that many GPUs (with ``gpu_memory`` per device).
    """
    group: Data = {"name": name, "resources": resources(cpu, memory, **extended)}
    if count is not None:
        group["count"] = count
    if gpu is not None:
        group["resources"]["gpu"] = gpu
        inventory: Data = {"count": gpu}
        if gpu_memory is not None:
            inventory["memory"] = gpu_memory
        if numa_nodes is not None:
            inventory["numa_nodes"] = numa_nodes
        group["gpus"] = inventory
    if labels:
        group["labels"] = dict(labels)
    taint_list = [taint(t) if isinstance(t, str) else dict(t) for t in taints]
    if taint_list:
        group["taints"] = taint_list
    return group


def node(name: str, **kwargs: Any) -> Data:
    """Exactly one node called ``name``."""
    return nodes(None, name=name, **kwargs)


def cluster(
    name: str,
    *groups: Data,
    labels: Mapping[str, str] | None = None,
    cost: Mapping[str, float] | None = None,
    startup_delay: float | None = None,
    fail_at: float | None = None,
) -> Data:
    result: Data = {"name": name, "nodes": list(groups) or [nodes(1)]}
    if labels:
        result["labels"] = dict(labels)
    if cost:
        result["cost"] = dict(cost)
    if startup_delay is not None:
        result["startup_delay"] = startup_delay
    if fail_at is not None:
        result["fail_at"] = fail_at
    return result


def queue(name: str, weight: float | None = None) -> Data:
    result: Data = {"name": name}
    if weight is not None:
        result["weight"] = weight
    return result


def task(
    name: str = "main",
    replicas: int = 1,
    *,
    cpu: float | str | None = 1,
    memory: float | str | None = None,
    gpu: float | None = None,
    **extended: float | str,
) -> Data:
    return {
        "name": name,
        "replicas": replicas,
        "resources": resources(cpu, memory, gpu, **extended),
    }


def job(
    name: str = "j",
    *,
    queue: str = "q",
    count: int | None = None,
    cpu: float | str | None = 1,
    memory: float | str | None = None,
    gpu: float | None = None,
    replicas: int = 1,
    tasks: Sequence[Data] | None = None,
    submit_at: float | None = None,
    duration: float | None = None,
    cancel_at: float | None = None,
    priority: int | None = None,
    node_affinity: Mapping[str, str] | None = None,
    preferred_nodes: Mapping[str, str] | None = None,
    cluster_affinity: Mapping[str, str] | None = None,
    preferred_clusters: Mapping[str, str] | None = None,
    tolerations: Iterable[Data] = (),
    **extended: float | str,
) -> Data:
    """One job (or with ``count`` N the jobs ``name-0 …``), by default one 1-cpu replica."""
    result: Data = {
        "name": name,
        "queue": queue,
        "tasks": list(tasks)
        if tasks is not None
        else [task("main", replicas, cpu=cpu, memory=memory, gpu=gpu, **extended)],
    }
    for field, value in (
        ("count", count),
        ("submit_at", submit_at),
        ("duration", duration),
        ("cancel_at", cancel_at),
        ("priority", priority),
    ):
        if value is not None:
            result[field] = value
    affinity: Data = {}
    if node_affinity or preferred_nodes:
        affinity["nodes"] = {
            "required": dict(node_affinity or {}),
            "preferred": dict(preferred_nodes or {}),
        }
    if cluster_affinity or preferred_clusters:
        affinity["clusters"] = {
            "required": dict(cluster_affinity or {}),
            "preferred": dict(preferred_clusters or {}),
        }
    if affinity:
        result["affinity"] = affinity
    toleration_list = list(tolerations)
    if toleration_list:
        result["tolerations"] = toleration_list
    return result


def jobs(name: str = "j", *, n: int, **kwargs: Any) -> Data:
    """``n`` alike jobs ``name-0 … name-(n-1)``, submitted in that order."""
    return job(name, count=n, **kwargs)


def scenario(
    *,
    clusters: Sequence[Data],
    jobs: Sequence[Data] = (),
    queues: Sequence[str | Data] = ("q",),
    settings: Mapping[str, Any] | None = None,
    expect: Sequence[Data] = (),
    name: str = "test",
    **extra: Any,
) -> Data:
    data: Data = {
        "name": name,
        "clusters": list(clusters),
        "queues": [queue(q) if isinstance(q, str) else q for q in queues],
        "jobs": list(jobs),
    }
    if settings:
        data["settings"] = dict(settings)
    if expect:
        data["expect"] = list(expect)
    data.update(extra)
    return data


def load(data: Data) -> Scenario:
    return scenario_from_data(data)


# --- running ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """The JSON report of a run, with accessors by name."""

    raw: dict[str, Any]

    def job(self, name: str) -> dict[str, Any]:
        matches = [job for job in self.raw["jobs"] if job["name"] == name]
        assert len(matches) == 1, f"job {name!r} appears {len(matches)} times in the report"
        return matches[0]

    def state(self, name: str) -> str:
        state: str = self.job(name)["state"]
        return state

    def cluster_of(self, name: str) -> str | None:
        cluster: str | None = self.job(name)["cluster"]
        return cluster

    def nodes_of(self, name: str) -> list[str]:
        return [placement["node"] for placement in self.job(name)["placements"]]

    def queue(self, name: str) -> dict[str, Any]:
        return next(q for q in self.raw["queues"] if q["name"] == name)

    def events(self, job: str | None = None, event: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.raw["events"]
            if (job is None or e["job"] == job) and (event is None or e["event"] == event)
        ]

    def running(self) -> set[str]:
        return {job["name"] for job in self.raw["jobs"] if job["state"] == "running"}


def run(data: Data, until: float | None = None) -> Simulator:
    """Validate ``data`` and simulate it with the real engine."""
    return simulate(load(data), SimulationOptions(until=until))


def simulate_report(data: Data, until: float | None = None) -> Report:
    return Report(build_report(run(data, until)))


def failed_expectations(data: Data, until: float | None = None) -> list[str]:
    return check_expectations(run(data, until))


# --- engine objects, for unit tests of plugins, strategies and ordering ----------------------


@dataclass(frozen=True)
class Fleet:
    """The engine's clusters and jobs built from scenario data, as the simulator builds them."""

    space: ResourceSpace
    clusters: list[Cluster]
    jobs: dict[str, SchedulingJob]

    def cluster(self, name: str | None = None) -> Cluster:
        if name is None:
            assert len(self.clusters) == 1
            return self.clusters[0]
        return next(c for c in self.clusters if c.name == name)

    def job(self, name: str) -> SchedulingJob:
        return self.jobs[name]


def fleet(data: Data) -> Fleet:
    spec = load(data)
    space = resource_space(spec)
    clusters = [build_cluster(c, order, space) for order, c in enumerate(spec.clusters)]
    built = {job.name: job for _, job in build_jobs(spec, space)}
    return Fleet(space, clusters, built)
