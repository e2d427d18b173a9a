"""The ``flotilla simulate`` report (JSON contract) and the ``expect`` checks."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import numpy as np

from flotilla.framework.resources import EPSILON
from flotilla.model.scenario import Expectation, ScenarioJobState
from flotilla.sim.simulator import Simulator
from flotilla.sim.state import SimJob

_TIME = attrgetter("time")


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(float(value), 6)


def build_report(sim: Simulator) -> dict[str, Any]:
    """The report of ``../shared/spec/scenario.md``; fields beyond it are additions."""
    jobs = []
    waits = []
    for job in sim.jobs:
        # The last run's placements, as the contract's example shows for a finished job.
        assignment = job.assignment if job.state is not ScenarioJobState.QUEUED else None
        placements = [
            {"task": p.task, "replica": p.replica, "node": p.node, "gpus": p.gpu_ids}
            for p in (assignment.placements if assignment else ())
        ]
        if job.first_scheduled_at is not None:
            waits.append(job.first_scheduled_at - job.spec.submit_at)
        last = job.assignment
        jobs.append(
            {
                "name": job.name,
                "queue": job.job.queue,
                "state": job.state.value if job.state else "unsubmitted",
                "cluster": last.cluster if last and not job.waiting else None,
                "placements": placements,
                "submitted_at": _number(job.spec.submit_at),
                "started_at": None if job.started_at is None else _number(job.started_at),
                "finished_at": None if job.finished_at is None else _number(job.finished_at),
                "preemptions": job.preemptions,
                "reason": job.reason
                if job.waiting or job.state in (ScenarioJobState.FAILED, ScenarioJobState.HELD)
                else None,
                "priority": job.job.priority,
            }
        )
    capacity = sim.capacity
    queues = []
    # Grouped once, not one pass over every job per queue; in job order, so every sum below
    # adds in job order and the report's figures do not depend on the grouping.
    jobs_by_queue: dict[str, list[SimJob]] = {}
    for job in sim.jobs:
        jobs_by_queue.setdefault(job.job.queue, []).append(job)
    for queue in sim.queues:
        queue_jobs = jobs_by_queue.get(queue.name, [])
        allocated = np.zeros(len(sim.space))
        for job in queue_jobs:
            if job.state is ScenarioJobState.RUNNING:
                allocated += job.job.total
        shares = np.divide(
            allocated, capacity, out=np.zeros_like(allocated), where=capacity > EPSILON
        )
        queue_waits = [
            j.first_scheduled_at - j.spec.submit_at
            for j in queue_jobs
            if j.first_scheduled_at is not None
        ]
        queues.append(
            {
                "name": queue.name,
                "allocated": {k: _number(v) for k, v in sim.space.as_dict(allocated).items()},
                "dominant_share": round(float(shares.max(initial=0.0)), 4),
                "weight": _number(queue.weight),
                "running": sum(1 for j in queue_jobs if j.state is ScenarioJobState.RUNNING),
                "queued": sum(1 for j in queue_jobs if j.waiting),
                "mean_wait": round(sum(queue_waits) / len(queue_waits), 3) if queue_waits else None,
                "lost_gpu_seconds": _number(round(sum(j.lost_gpu_seconds for j in queue_jobs), 3)),
            }
        )
    states: dict[str, int] = {}
    for job in sim.jobs:
        key = job.state.value if job.state else "unsubmitted"
        states[key] = states.get(key, 0) + 1
    # A stable sort by time keeps events of one time in the order they happened.
    ordered_events = sorted(sim.events, key=_TIME)
    quotas = []
    if sim.quotas is not None:
        from flotilla.plugins.quota import start_usage

        state = start_usage(sim.snapshot(sim.end_time))
        if state is not None:
            usage, runtime = state.usage.report()
            tree = sim.quotas
            for index, name in enumerate(tree.names):
                bounded = tree.bounded[index]
                parent = tree.parent[index]
                quotas.append(
                    {
                        "name": name,
                        "parent": None if parent is None else tree.names[parent],
                        "usage": {k: _number(v) for k, v in usage[name].items()},
                        "runtime_quota": {
                            k: _number(v)
                            for k, v in runtime[name].items()
                            if bounded[sim.space.index[k]]
                        },
                        "guaranteed": {
                            sim.space.names[d]: _number(float(tree.guaranteed[index][d]))
                            for d in range(len(sim.space))
                            if bounded[d]
                        },
                    }
                )
    return {
        "scenario": sim.scenario.name,
        "end_time": _number(sim.end_time),
        "jobs": jobs,
        "events": [{**event.as_dict(), "time": _number(event.time)} for event in ordered_events],
        "queues": queues,
        "clusters": [
            {
                "name": cluster.name,
                "state": cluster.state.value,
                "nodes": len(cluster.nodes),
                "allocated": {
                    k: _number(v)
                    for k, v in cluster.nodes.space.as_dict(
                        cluster.nodes.allocated.sum(axis=0)
                    ).items()
                },
                "capacity": {
                    k: _number(v)
                    for k, v in cluster.nodes.space.as_dict(cluster.total_capacity()).items()
                },
            }
            for cluster in sim.clusters
        ],
        "quotas": quotas,
        "summary": {
            "cycles": sim.cycles,
            "jobs": len(sim.jobs),
            "scheduled": sum(1 for job in sim.jobs if job.first_scheduled_at is not None),
            "utilization": sim.utilization(),
            "mean_wait": round(sum(waits) / len(waits), 3) if waits else 0.0,
            "wall_seconds": round(sim.wall_seconds, 4),
            "states": states,
            "end_reason": sim.end_reason,
            "decisions": sim.decisions,
            "preemptions": sim.preemptions,
            "lost_gpu_seconds": _number(round(sum(job.lost_gpu_seconds for job in sim.jobs), 3)),
        },
    }


def check_expectations(sim: Simulator) -> list[str]:
    """Every ``expect`` entry that does not hold, as a sentence naming what differs."""
    failures = []
    for index, expectation in enumerate(sim.scenario.expect):
        label = (
            f"expect[{index}] at {'end' if expectation.at == 'end' else f't={expectation.at:g}'}"
        )
        facts = _facts(sim, expectation)
        if facts is None:
            failures.append(f"{label}: not reached (the run stopped at t={sim.end_time:g})")
            continue
        failures += [f"{label}: {problem}" for problem in _compare(expectation, facts)]
    return failures


def _facts(sim: Simulator, expectation: Expectation) -> dict[str, Any] | None:
    at = expectation.at
    if at == "end" or (
        float(at) > sim.end_time and sim.end_reason not in ("--until", "settings.max_time")
    ):
        if expectation.job is not None:
            return sim.job_facts(sim.job_by_name[expectation.job])
        assert expectation.queue is not None
        return dict(sim.queue_counts(expectation.queue))
    moment = sim.moments.get(sim.grid_floor(float(at)))
    if moment is None:
        return None
    if expectation.job is not None:
        return moment.jobs[expectation.job]
    assert expectation.queue is not None
    return dict(moment.queues[expectation.queue])


def _compare(expectation: Expectation, facts: dict[str, Any]) -> list[str]:
    subject = f"job {expectation.job}" if expectation.job else f"queue {expectation.queue}"
    problems = []
    if expectation.state is not None and facts["state"] != expectation.state.value:
        why = f" ({facts['reason']})" if facts.get("reason") else ""
        problems.append(f"{subject} is {facts['state']}{why}, expected {expectation.state.value}")
    if expectation.cluster is not None and facts["cluster"] != expectation.cluster:
        problems.append(
            f"{subject} is on cluster {facts['cluster']}, expected {expectation.cluster}"
        )
    if expectation.reason is not None and expectation.reason not in (facts.get("reason") or ""):
        problems.append(
            f"{subject} reason is {facts.get('reason')!r}, expected it to contain "
            f"{expectation.reason!r}"
        )
    if expectation.preemptions is not None and facts["preemptions"] != expectation.preemptions:
        problems.append(
            f"{subject} was preempted {facts['preemptions']} times, "
            f"expected {expectation.preemptions}"
        )
    if expectation.placements is not None and facts["placements"] != expectation.placements:
        problems.append(
            f"{subject} has {facts['placements']} replicas placed, "
            f"expected {expectation.placements}"
        )
    for count in ("running", "queued"):
        wanted = getattr(expectation, count)
        if wanted is not None and facts[count] != wanted:
            problems.append(f"{subject} has {facts[count]} {count}, expected {wanted}")
    return problems
