"""``flotilla simulate``'s JSON report (``../shared/spec/scenario.md``), built from what a
live service recorded during a replay.

Times are scenario seconds: wall seconds since the replay's time 0, times its speed. The
service's states map onto the scenario's: ``leased`` and ``pending`` are ``running`` (the
simulator's job is running from the moment it is placed, before its ``startup_delay`` ends),
a queued job whose last run was preempted is ``preempted``. The service's events become the
report's: ``scheduled`` (a lease), ``started``, ``preempted``, ``requeued`` and the ends.
Figures only the engine's own bookkeeping has (per-quota usage, utilisation over time,
decisions, lost GPU-seconds) are left empty (null for a number); ``summary.replay`` says how
the replay ran.
"""

from __future__ import annotations

from typing import Any

from flotilla.api.schemas import Event, JobDetail, Run
from flotilla.lifecycle.states import (
    ACTIVE_STATE_NAMES,
    TERMINAL_STATE_NAMES,
    WAITING_STATE_NAMES,
)
from flotilla.replay.driver import Observed

RUNNING = ACTIVE_STATE_NAMES
WAITING = WAITING_STATE_NAMES
ENDS = TERMINAL_STATE_NAMES


def _number(value: float) -> float | int:
    rounded = round(float(value), 3)
    return int(rounded) if rounded.is_integer() else rounded


def scenario_state(detail: JobDetail, events: list[Event]) -> str:
    """The job's state in the scenario's words, after its last transition in ``events``."""
    transitions = [e for e in events if e.kind == "transition" and e.to_state]
    state = transitions[-1].to_state if transitions else "queued"
    if state in RUNNING:
        return "running"
    if state == "queued" and any(e.to_state == "preempted" for e in transitions):
        # Preempted and not yet rescheduled: nothing was leased since the preemption.
        after = transitions[-1 - [e.to_state for e in reversed(transitions)].index("preempted") :]
        if not any(e.to_state == "leased" for e in after):
            return "preempted"
    return str(state)


def _as_of(detail: JobDetail, events: list[Event], cutoff: float) -> tuple[JobDetail, list[Event]]:
    """The job and its events as they stood at wall time ``cutoff``: later runs left out,
    later starts and ends not yet happened."""
    runs = []
    for run in detail.runs:
        if run.created_at.timestamp() > cutoff:
            continue
        started = (
            run.started_at if run.started_at and run.started_at.timestamp() <= cutoff else None
        )
        finished = (
            run.finished_at if run.finished_at and run.finished_at.timestamp() <= cutoff else None
        )
        runs.append(run.model_copy(update={"started_at": started, "finished_at": finished}))
    earlier = [event for event in events if event.time.timestamp() <= cutoff]
    return detail.model_copy(update={"runs": runs}), earlier


def build_replay_report(observed: Observed) -> dict[str, Any]:
    """The report of the replay, field for field as ``flotilla simulate`` writes it."""
    plan = observed.plan
    at = observed.scenario_time
    jobs: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    waits: dict[str, list[float]] = {}
    running_totals: dict[str, dict[str, float]] = {}
    counts: dict[str, dict[str, int]] = {}
    totals = _job_totals(observed)
    for planned in plan.jobs:
        found = observed.details.get(planned.name)
        queue_counts = counts.setdefault(planned.queue, {"running": 0, "queued": 0})
        if found is None:
            jobs.append(_unsubmitted(planned.name, planned.queue, planned.submit_at))
            continue
        detail, job_events = _as_of(found, observed.events.get(planned.name, []), observed.cutoff)
        state = scenario_state(detail, job_events)
        run = detail.runs[-1] if detail.runs else None
        waiting = state in WAITING
        if detail.runs:
            waits.setdefault(planned.queue, []).append(
                at(detail.runs[0].created_at.timestamp()) - at(detail.submitted_at.timestamp())
            )
        if state == "running":
            queue_counts["running"] += 1
            held = running_totals.setdefault(planned.queue, {})
            for resource, amount in totals[planned.name].items():
                held[resource] = held.get(resource, 0.0) + amount
        elif waiting:
            queue_counts["queued"] += 1
        ended = next((e for e in reversed(job_events) if e.to_state in ENDS), None)
        jobs.append(
            {
                "name": planned.name,
                "queue": planned.queue,
                "state": state,
                "cluster": run.cluster if run is not None and not waiting else None,
                "placements": [] if waiting or run is None else _placements(run),
                "submitted_at": _number(at(detail.submitted_at.timestamp())),
                "started_at": _time(at, run.started_at if run else None),
                "finished_at": _number(at(ended.time.timestamp()))
                if ended is not None and state in ENDS
                else None,
                "preemptions": sum(1 for e in job_events if e.to_state == "preempted"),
                "reason": (detail.pending_reason or detail.reason)
                if waiting or state == "failed"
                else None,
                "priority": detail.priority,
            }
        )
        events += _events(planned.name, detail, job_events, at)
    # By time, then in the order the service wrote them (one cycle's leases are written in
    # the order the round decided them, as the simulator lists them).
    events.sort(key=lambda event: (event["time"], event.pop("_id")))
    capacity = _capacity(observed)
    queues = []
    for queue in plan.scenario.queues:
        held = running_totals.get(queue.name, {})
        shares = [held[r] / capacity[r] for r in held if capacity.get(r, 0) > 0]
        queue_waits = waits.get(queue.name, [])
        queues.append(
            {
                "name": queue.name,
                "allocated": {r: _number(v) for r, v in held.items() if v},
                "dominant_share": round(max(shares, default=0.0), 4),
                "weight": _number(queue.weight),
                **counts.get(queue.name, {"running": 0, "queued": 0}),
                "mean_wait": round(sum(queue_waits) / len(queue_waits), 3) if queue_waits else None,
                "lost_gpu_seconds": None,  # the engine's bookkeeping (checkpoints): not observed
            }
        )
    states: dict[str, int] = {}
    for job in jobs:
        states[job["state"]] = states.get(job["state"], 0) + 1
    every_wait = [wait for queue_waits in waits.values() for wait in queue_waits]
    names = {cluster.name for cluster in plan.scenario.clusters}
    return {
        "scenario": plan.scenario.name,
        "end_time": _number(observed.end_time),
        "jobs": jobs,
        "events": events,
        "queues": queues,
        "clusters": [
            {
                "name": cluster.name,
                "state": cluster.state,
                "nodes": cluster.nodes,
                "allocated": {r: _number(v) for r, v in cluster.allocated.items() if v},
                "capacity": {r: _number(v) for r, v in cluster.capacity.items() if v},
            }
            for cluster in observed.clusters
            if cluster.name in names
        ],
        "quotas": [],
        "summary": {
            "cycles": observed.cycles,
            "jobs": len(jobs),
            "scheduled": sum(1 for detail in observed.details.values() if detail.runs),
            "utilization": {},
            "mean_wait": round(sum(every_wait) / len(every_wait), 3) if every_wait else 0.0,
            "wall_seconds": round(observed.wall_seconds, 4),
            "states": states,
            "end_reason": observed.end_reason,
            "decisions": 0,
            "preemptions": sum(job["preemptions"] for job in jobs),
            "lost_gpu_seconds": None,  # the engine's bookkeeping (checkpoints): not observed
            "replay": {"speed": plan.speed, "unsupported": list(plan.unsupported)},
        },
    }


def _unsubmitted(name: str, queue: str, submit_at: float) -> dict[str, Any]:
    return {
        "name": name,
        "queue": queue,
        "state": "unsubmitted",
        "cluster": None,
        "placements": [],
        "submitted_at": _number(submit_at),
        "started_at": None,
        "finished_at": None,
        "preemptions": 0,
        "reason": None,
        "priority": 0,
    }


def _time(at: Any, moment: Any) -> float | int | None:
    return None if moment is None else _number(at(moment.timestamp()))


def _placements(run: Run) -> list[dict[str, Any]]:
    return [
        {
            "task": placement.get("task"),
            "replica": placement.get("replica"),
            "node": placement.get("node"),
            "gpus": list(placement.get("gpus") or []),
        }
        for placement in run.assignment.get("placements", [])
    ]


def _nodes(run: Run | None) -> list[str]:
    """The run's nodes, each once, in placement order (as the simulator lists them)."""
    if run is None:
        return []
    seen: dict[str, None] = {}
    for placement in run.assignment.get("placements", []):
        seen.setdefault(str(placement.get("node")), None)
    return list(seen)


def _events(name: str, detail: JobDetail, events: list[Event], at: Any) -> list[dict[str, Any]]:
    runs = {run.id: run for run in detail.runs}
    found: list[dict[str, Any]] = []
    for event in events:
        time = _number(at(event.time.timestamp()))
        record: dict[str, Any] = {"time": time, "job": name, "_id": event.id}
        run = runs.get(event.run_id or "")
        if event.kind == "submitted":
            found.append({**record, "event": "submitted"})
        elif event.kind != "transition":
            continue
        elif event.to_state == "leased":
            cluster = run.cluster if run else None
            found.append({**record, "event": "scheduled", "cluster": cluster, "nodes": _nodes(run)})
        elif event.to_state == "running" and event.from_state != "running":
            cluster = run.cluster if run else None
            found.append({**record, "event": "started", "cluster": cluster, "nodes": _nodes(run)})
        elif event.to_state == "preempted":
            found.append({**record, "event": "preempted", "reason": event.reason})
        elif event.to_state == "queued" and event.from_state in RUNNING:
            found.append({**record, "event": "requeued", "reason": event.reason})
        elif event.to_state in ENDS:
            end = {**record, "event": event.to_state}
            if event.to_state == "failed":
                end["reason"] = event.reason
            found.append(end)
    return found


def _job_totals(observed: Observed) -> dict[str, dict[str, float]]:
    """Each job's resources, all its replicas together, in base units."""
    totals: dict[str, dict[str, float]] = {}
    for spec in observed.plan.scenario.jobs:
        total: dict[str, float] = {}
        for task in spec.tasks:
            for resource, amount in task.resources.items():
                total[resource] = total.get(resource, 0.0) + amount * task.replicas
        for name in spec.job_names():
            totals[name] = total
    return totals


def _capacity(observed: Observed) -> dict[str, float]:
    names = {cluster.name for cluster in observed.plan.scenario.clusters}
    capacity: dict[str, float] = {}
    for cluster in observed.clusters:
        if cluster.name in names:
            for resource, amount in cluster.capacity.items():
                capacity[resource] = capacity.get(resource, 0.0) + amount
    return capacity
