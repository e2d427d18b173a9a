"""A live export with its fleet part replaced: the what-if of ``flotilla simulate
--from-server URL --fleet changed.yaml``.

The changed fleet replaces the export's settings, priority classes, clusters, quotas and
queues (as ``simulate --fleet`` does). A cluster it lists without nodes keeps the nodes the
export found for it (a service's cluster gets its nodes from its backend); a running job whose
cluster or node the changed fleet removed goes back to waiting, with what was left of its run
as its duration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flotilla.model.errors import SpecError
from flotilla.model.fleet import Fleet
from flotilla.model.fleet_loader import FleetError
from flotilla.model.loader import scenario_from_data
from flotilla.model.scenario import Scenario

FLEET_PART = ("settings", "priority_classes", "clusters", "quotas", "queues")


def with_changed_fleet(
    exported: Mapping[str, Any], fleet: Fleet, fleet_source: str | None = None
) -> Scenario:
    """The export with ``fleet``'s fleet part; FleetError naming the field when a cluster
    has no nodes in either, SpecError when a queue holding jobs is gone."""
    found = {cluster["name"]: cluster for cluster in exported.get("clusters", [])}
    part = fleet.model_dump(mode="json", include=set(FLEET_PART))
    problems = []
    for index, cluster in enumerate(part["clusters"]):
        cluster.pop("settings", None)
        if not cluster.get("nodes"):
            if cluster["name"] not in found:
                problems.append(
                    f"clusters[{index}].nodes: cluster {cluster['name']} is not in the live "
                    "fleet, so its nodes must be listed"
                )
                continue
            cluster["nodes"] = found[cluster["name"]]["nodes"]
    if problems:
        raise FleetError(problems, fleet_source)
    merged = {key: value for key, value in exported.items() if key not in FLEET_PART}
    merged.update(part)
    queues = {queue["name"] for queue in part["queues"]}
    gone = sorted({job["queue"] for job in merged.get("jobs", [])} - queues)
    if gone:
        raise SpecError(
            [f"queues: the changed fleet has no queue {name!r}, which holds jobs" for name in gone],
            fleet_source,
        )
    nodes = {
        cluster["name"]: {name for group in cluster["nodes"] for name in _names(group)}
        for cluster in part["clusters"]
    }
    live = merged.get("live")
    if isinstance(live, dict):
        kept = []
        for entry in live.get("jobs", []):
            running = entry.get("running")
            if running is not None and not _still_there(running, nodes):
                entry = {key: value for key, value in entry.items() if key != "running"}
            kept.append(entry)
        merged["live"] = {**live, "jobs": kept}
    return scenario_from_data(merged, "changed fleet")


def _still_there(running: Mapping[str, Any], nodes: Mapping[str, set[str]]) -> bool:
    there = nodes.get(str(running.get("cluster")))
    return there is not None and all(p.get("node") in there for p in running["placements"])


def _names(group: Mapping[str, Any]) -> list[str]:
    count = group.get("count")
    name = str(group["name"])
    return [name] if count is None else [f"{name}-{index}" for index in range(int(count))]
