"""Invariants of every run, over random small scenarios (hypothesis).

Whatever the fleet, workload and settings, a run never over-allocates a node on any resource
or a GPU device beyond 1.0, never places a replica where its required node or cluster
affinity or a hard taint forbids, never splits a job across clusters, reports every job
exactly once and says why every queued job waits.

Node and device allocation is checked two ways: by replaying the report's events with each
job's requests (independent of the engine's bookkeeping), and by looking at the simulator's
node tables after every cycle through a small test-only hook.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flotilla.model import Scenario
from flotilla.sim import Simulator
from flotilla.sim.report import build_report
from tests.builders import Data, load

EPS = 1e-6
REGIONS = ("us", "eu")
POOLS = ("a", "b")
TAINTS = (
    {"key": "dedicated", "value": "infra", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "infra", "effect": "NoExecute"},
    {"key": "dedicated", "effect": "NoSchedule"},  # no value: the empty string
    {"key": "gpu", "value": "true", "effect": "NoExecute"},
    {"key": "spot", "value": "true", "effect": "PreferNoSchedule"},
)
TOLERATIONS = (
    {"key": "dedicated", "operator": "Equal", "value": "infra"},
    {"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"},
    {"key": "dedicated"},  # Equal without a value: tolerates only an empty-valued taint
    {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
    {"key": "gpu", "operator": "Exists"},
    {"operator": "Exists"},
)

quarters = st.integers(1, 16).map(lambda n: n / 4)


@st.composite
def node_groups(draw: st.DrawFn, index: int) -> Data:
    gpus = draw(st.sampled_from([0, 0, 1, 2]))
    group: Data = {
        "name": f"g{index}",
        "count": draw(st.integers(1, 2)),
        "resources": {"cpu": draw(st.integers(1, 8)), "memory": f"{draw(st.integers(1, 8))}Gi"},
        "labels": {"pool": draw(st.sampled_from(POOLS))},
        # Up to two taints per node; Kubernetes keys a taint by (key, effect).
        "taints": draw(
            st.lists(
                st.sampled_from(TAINTS),
                max_size=2,
                unique_by=lambda taint: (taint["key"], taint["effect"]),
            )
        ),
    }
    if gpus:
        group["gpus"] = {"count": gpus}
    return group


@st.composite
def clusters(draw: st.DrawFn, index: int) -> Data:
    return {
        "name": f"c{index}",
        "labels": {"region": draw(st.sampled_from(REGIONS))},
        "cost": {"cpu": draw(st.sampled_from([0.01, 0.02, 0.05]))},
        "startup_delay": draw(st.sampled_from([0, 0, 2])),
        "fail_at": draw(st.sampled_from([None, None, None, 3, 6])),
        "nodes": [draw(node_groups(i)) for i in range(draw(st.integers(1, 2)))],
    }


@st.composite
def tasks(draw: st.DrawFn, index: int) -> Data:
    resources: Data = {"cpu": draw(quarters)}
    if draw(st.booleans()):
        resources["memory"] = f"{draw(st.integers(1, 4))}Gi"
    gpu = draw(st.sampled_from([0, 0, 0, 0.25, 0.5, 1, 2]))
    if gpu:
        resources["gpu"] = gpu
    return {"name": f"t{index}", "replicas": draw(st.integers(1, 3)), "resources": resources}


@st.composite
def job_specs(draw: st.DrawFn, index: int, queues: list[str]) -> Data:
    submit_at = draw(st.integers(0, 5))
    spec: Data = {
        "name": f"j{index}",
        "queue": draw(st.sampled_from(queues)),
        "submit_at": submit_at,
        "duration": draw(st.sampled_from([None, 1, 2, 4, 8])),
        "tasks": [draw(tasks(i)) for i in range(draw(st.integers(1, 2)))],
        "priority": draw(st.integers(0, 2)),
    }
    if draw(st.booleans()):
        spec["count"] = draw(st.integers(1, 2))
    if draw(st.integers(0, 3)) == 0:
        spec["cancel_at"] = submit_at + draw(st.integers(0, 6))
    affinity: Data = {}
    if draw(st.integers(0, 2)) == 0:
        affinity["nodes"] = {"required": {"pool": draw(st.sampled_from(POOLS))}}
    if draw(st.integers(0, 2)) == 0:
        affinity["clusters"] = {
            "required": {"region": draw(st.sampled_from(REGIONS))},
            "preferred": {},
        }
    elif draw(st.booleans()):
        affinity["clusters"] = {"preferred": {"region": draw(st.sampled_from(REGIONS))}}
    if affinity:
        spec["affinity"] = affinity
    spec["tolerations"] = draw(st.lists(st.sampled_from(TOLERATIONS), max_size=2))
    if draw(st.integers(0, 4)) == 0:
        replicas = sum(t["replicas"] for t in spec["tasks"])
        spec["gang"] = {"min_member": replicas, "mode": "strict"}
    return spec


@st.composite
def scenarios(draw: st.DrawFn) -> Data:
    queue_names = [f"q{i}" for i in range(draw(st.integers(1, 3)))]
    return {
        "name": "random",
        "settings": {
            "mode": draw(st.sampled_from(["sync", "async"])),
            "assignment_strategy": draw(
                st.sampled_from(["cluster-only", "resource-aware", "cost-optimized"])
            ),
            "fair_share": draw(st.sampled_from(["drf", "drf", "fifo"])),
            "queueing": draw(st.sampled_from(["best-effort-fifo", "strict-fifo"])),
            "max_time": 60,
        },
        "clusters": [draw(clusters(i)) for i in range(draw(st.integers(1, 3)))],
        "queues": [{"name": q, "weight": draw(st.integers(1, 3))} for q in queue_names],
        "jobs": [draw(job_specs(i, queue_names)) for i in range(draw(st.integers(1, 7)))],
    }


# --- an independent model of the rules the engine must keep ----------------------------------


def tolerated(toleration: Data, taint: Data) -> bool:
    """Kubernetes' ``Toleration.ToleratesTaint``, written here independently of the engine's
    plugin: an effect, when given, must be the taint's; a key, when given, must be the taint's
    (an empty key with Exists tolerates every taint); Exists then matches any value, and Equal
    compares values exactly, a missing value being the empty string on either side."""
    if toleration.get("effect") not in (None, taint["effect"]):
        return False
    operator = toleration.get("operator", "Equal")
    key = toleration.get("key", "")
    if key == "":
        return operator == "Exists"
    if key != taint["key"]:
        return False
    return operator == "Exists" or toleration.get("value", "") == taint.get("value", "")


class CheckedSimulator(Simulator):
    """Checks every cluster's node tables after every cycle."""

    def _cycle(self, now: float) -> bool:
        changed = super()._cycle(now)
        for cluster in self.clusters:
            table = cluster.nodes
            over = table.allocated > table.capacity + EPS
            assert not over.any(), f"t={now:g}: {cluster.name} over-allocated: {table.allocated}"
            assert (table.allocated > -EPS).all(), f"t={now:g}: negative allocation"
            assert (table.device_free > -EPS).all(), f"t={now:g}: a GPU shared beyond 1.0"
            assert (table.device_free < 1 + EPS).all(), f"t={now:g}: a GPU freed twice"
        return changed


def node_inventory(data: Data) -> dict[tuple[str, str], Data]:
    inventory = {}
    for cluster in data["clusters"]:
        for group in cluster["nodes"]:
            for i in range(group["count"]):
                inventory[(cluster["name"], f"{group['name']}-{i}")] = {
                    "cluster": cluster,
                    "group": group,
                    "gpus": group.get("gpus", {}).get("count", 0),
                }
    return inventory


def replay_events(data: Data, spec: Scenario, report: dict[str, Any]) -> None:
    """Replay the events with each job's requests; check every placement rule on the way."""
    inventory = node_inventory(data)
    specs_by_job = {name: job for job in spec.jobs for name in job.job_names()}
    raw_by_job = {
        name: raw
        for raw, job in zip(data["jobs"], spec.jobs, strict=True)
        for name in job.job_names()
    }
    capacity: dict[tuple[str, str], dict[str, float]] = {}
    for key, entry in inventory.items():
        group_spec = next(
            g
            for c in spec.clusters
            if c.name == key[0]
            for g in c.nodes
            if g.name == entry["group"]["name"]
        )
        capacity[key] = {**group_spec.resources, "gpu": float(entry["gpus"])}
    used: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    holding: dict[str, list[tuple[tuple[str, str], dict[str, float]]]] = {}
    failed_at = {c["name"]: c["fail_at"] for c in data["clusters"] if c["fail_at"] is not None}

    for event in report["events"]:
        name, kind = event["job"], event["event"]
        if kind in ("succeeded", "cancelled", "requeued", "failed", "preempted"):
            for key, request in holding.pop(name, []):
                for resource, amount in request.items():
                    used[key][resource] -= amount
            continue
        if kind != "scheduled":
            continue
        assert name not in holding, f"{name} scheduled twice without ending"
        job_spec, raw = specs_by_job[name], raw_by_job[name]
        cluster_name = event["cluster"]
        cluster = next(c for c in data["clusters"] if c["name"] == cluster_name)
        if cluster_name in failed_at:
            assert event["time"] < failed_at[cluster_name], f"{name} placed on a failed cluster"
        required_cluster = job_spec.affinity.clusters.required
        assert all(cluster["labels"].get(k) == v for k, v in required_cluster.items()), (
            f"{name} on {cluster_name} violates its required cluster affinity"
        )
        replicas = [task for task in job_spec.tasks for _ in range(task.replicas)]
        assert len(event["nodes"]) == len(replicas), f"{name}: not every replica placed"
        claims = []
        for task, node_name in zip(replicas, event["nodes"], strict=True):
            key = (cluster_name, node_name)
            assert key in inventory, f"{name}: node {node_name} is not in {cluster_name}"
            group = inventory[key]["group"]
            required = job_spec.affinity.nodes.required
            assert all(group["labels"].get(k) == v for k, v in required.items()), (
                f"{name} on {node_name} violates its required node affinity"
            )
            for taint in group["taints"]:
                if taint["effect"] != "PreferNoSchedule":
                    assert any(tolerated(t, taint) for t in raw.get("tolerations", [])), (
                        f"{name} on {node_name} without tolerating {taint}"
                    )
            request = dict(task.resources)
            for resource, amount in request.items():
                used[key][resource] += amount
                limit = capacity[key].get(resource, 0.0)
                assert used[key][resource] <= limit + EPS, (
                    f"t={event['time']}: {node_name} of {cluster_name} over-allocated on "
                    f"{resource}: {used[key][resource]} > {limit}"
                )
            claims.append((key, request))
        holding[name] = claims


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios())
def test_runs_keep_every_invariant(data: Data) -> None:
    spec = load(data)
    sim = CheckedSimulator(spec)
    sim.run()
    report = build_report(sim)

    expected_names = [name for job in spec.jobs for name in job.job_names()]
    reported = [job["name"] for job in report["jobs"]]
    assert sorted(reported) == sorted(expected_names), "every job exactly once"

    for job in report["jobs"]:
        if job["state"] == "queued":
            assert job["reason"], f"{job['name']} is queued without a reason"
        if job["state"] == "running":
            clusters = {p["node"] for p in job["placements"]}
            assert job["cluster"] is not None and clusters

    replay_events(data, spec, report)
    check_device_shares(spec, report)


def check_device_shares(spec: Scenario, report: dict[str, Any]) -> None:
    """Running jobs' reported GPU ids: the right number each, no device beyond 1.0."""
    specs_by_job = {name: job for job in spec.jobs for name in job.job_names()}
    shares: dict[tuple[str, str, int], float] = defaultdict(float)
    for job in report["jobs"]:
        if job["state"] != "running":
            continue
        tasks_by_name = {task.name: task for task in specs_by_job[job["name"]].tasks}
        for placement in job["placements"]:
            gpu = tasks_by_name[placement["task"]].resources.get("gpu", 0.0)
            assert len(placement["gpus"]) == (1 if 0 < gpu < 1 else int(gpu))
            for device in placement["gpus"]:
                key = (job["cluster"], placement["node"], device)
                shares[key] += gpu if gpu < 1 else 1.0
                assert shares[key] <= 1 + EPS, f"GPU {key} shared beyond 1.0"
