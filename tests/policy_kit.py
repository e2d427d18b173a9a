"""Small scenario builders for the policy tests: plain dicts, loaded like a scenario file."""

from __future__ import annotations

from typing import Any

from flotilla.model import scenario_from_data
from flotilla.sim import Simulator, simulate
from flotilla.sim.report import build_report

Data = dict[str, Any]


def node(name: str = "n", cpu: float = 8, gpus: int = 0, **extra: Any) -> Data:
    """One node with ``gpus`` devices; ``inventory`` adds GPU topology (``numa_nodes``…)."""
    inventory = extra.pop("inventory", None)
    group: Data = {"name": name, "resources": {"cpu": cpu, "memory": "64Gi"}, **extra}
    if inventory is not None:
        group["gpus"] = {"count": gpus, **inventory}
    elif gpus:
        group["resources"]["gpu"] = gpus
    return group


def job(name: str, queue: str = "q", cpu: float = 1, replicas: int = 1, **extra: Any) -> Data:
    resources: Data = {"cpu": cpu}
    if "gpu" in extra:
        resources["gpu"] = extra.pop("gpu")
    task: Data = {"name": "main", "replicas": replicas, "resources": resources}
    if "topology" in extra:
        task["topology"] = {"gpu": extra.pop("topology")}
    return {"name": name, "queue": queue, "tasks": [task], **extra}


def scenario(
    *jobs: Data,
    nodes: list[Data] | None = None,
    queues: list[Data] | None = None,
    quotas: list[Data] | None = None,
    **settings: Any,
) -> Data:
    return {
        "name": "policy-test",
        "settings": settings,
        "clusters": [{"name": "c", "nodes": nodes or [node()]}],
        "quotas": quotas or [],
        "queues": queues or [{"name": "q"}],
        "jobs": list(jobs),
    }


def run(data: Data) -> Simulator:
    return simulate(scenario_from_data(data))


def report(data: Data) -> dict[str, Any]:
    return build_report(run(data))


def jobs_by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in result["jobs"]}


def events_of(result: dict[str, Any], name: str) -> list[str]:
    return [event["event"] for event in result["events"] if event["job"] == name]
