"""Compare a ``flotilla simulate`` report with a ``flotilla replay`` report of one scenario.

What must match, per job: the final state, the number of runs (``scheduled`` events), the
cluster, the number of replicas placed (a non-strict gang grows), and the order in which the
jobs of one queue first started (those both started); its submit, start and finish times
must agree within a tolerance (``tolerance``). Each difference is one line naming the job,
the field, and both values. A run cut at ``max_time`` may leave a job on two sides of the
cut — started or ended just before it in one, just after in the other: when that event lies
within the tolerance of the cut, the job's state is no difference (``across_the_cut``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flotilla.model.scenario import Scenario

WALL_SLACK = 1.5
"""Wall seconds a service may lag the simulator's clock: a dispatch, a poll and a commit on
a loaded 2-core machine."""


LAG_FACTOR = 3
"""How many times the service's measured lag a time may drift: a start waits for the end
before it, which waited for its own start."""


def tolerance(cycle_interval: float, speed: float, lag: float = 0.0) -> float:
    """Scenario seconds two times may differ by: the service sees a run end at its next
    cycle (one interval), and acts one more cycle later at worst; plus the wall-clock
    slack, scaled by the speed; plus ``LAG_FACTOR`` times the lag the service showed in
    this very replay (``service_lag``), so that a loaded machine widens the tolerance
    instead of failing the comparison of times."""
    return 2 * cycle_interval + WALL_SLACK * speed + LAG_FACTOR * lag


def service_lag(replayed: Mapping[str, Any], scenario: Scenario) -> float:
    """The largest delay the service showed in a replay, in scenario seconds: a submission
    taken after its time (the replay waits for the service's cycle before each step), or a
    run started after its lease beyond its cluster's ``startup_delay`` (the dispatch)."""
    planned = {name: spec.submit_at for spec in scenario.jobs for name in spec.job_names()}
    delays = {cluster.name: cluster.startup_delay for cluster in scenario.clusters}
    lag = 0.0
    for job in replayed["jobs"]:
        if job["state"] != "unsubmitted":
            lag = max(lag, job["submitted_at"] - planned[job["name"]])
    leased: dict[str, Mapping[str, Any]] = {}
    for event in replayed["events"]:
        if event["event"] == "scheduled":
            leased[event["job"]] = event
        elif event["event"] == "started" and event["job"] in leased:
            lease = leased[event["job"]]
            lag = max(lag, event["time"] - lease["time"] - delays.get(lease["cluster"], 0.0))
    return lag


@dataclass(frozen=True)
class Difference:
    job: str
    field: str
    simulated: Any
    replayed: Any

    def __str__(self) -> str:
        return f"{self.job}: {self.field}: simulate {self.simulated!r}, replay {self.replayed!r}"


def runs(report: Mapping[str, Any]) -> dict[str, int]:
    """Each job's number of runs: how often it was scheduled."""
    counts = {job["name"]: 0 for job in report["jobs"]}
    for event in report["events"]:
        if event["event"] == "scheduled":
            counts[event["job"]] += 1
    return counts


def start_order(report: Mapping[str, Any]) -> dict[str, list[str]]:
    """Per queue, its jobs in the order they were first scheduled."""
    queue_of = {job["name"]: job["queue"] for job in report["jobs"]}
    order: dict[str, list[str]] = {}
    seen: set[str] = set()
    for event in report["events"]:
        if event["event"] == "scheduled" and event["job"] not in seen:
            seen.add(event["job"])
            order.setdefault(queue_of[event["job"]], []).append(event["job"])
    return order


WAITING = frozenset({"queued", "preempted"})
ENDED = frozenset({"succeeded", "failed", "cancelled"})


def across_the_cut(
    job: Mapping[str, Any], other: Mapping[str, Any], cut: float, slack: float
) -> bool:
    """Whether the two states of a job differ only because the run was cut (``max_time``)
    between two events of it that lie within ``slack`` of the cut: one side started it
    (queued / running) or ended it (running / ended) just before the cut, the other just
    after. The times agree within the tolerance; the cut puts them on two sides of it."""
    states = {job["state"], other["state"]}
    if states & WAITING and "running" in states:
        moment = next(j["started_at"] for j in (job, other) if j["state"] == "running")
    elif "running" in states and states & ENDED:
        moment = next(j["finished_at"] for j in (job, other) if j["state"] in ENDED)
    else:
        return False
    return moment is not None and abs(moment - cut) <= slack


def compare(
    simulated: Mapping[str, Any],
    replayed: Mapping[str, Any],
    slack: float,
    cut: float | None = None,
) -> list[Difference]:
    """Every difference between the two reports beyond ``slack`` scenario seconds. ``cut``:
    the runs ended at this ``max_time``; a job whose state differs only across the cut
    (``across_the_cut``) differs in nothing."""
    differences: list[Difference] = []
    replay_jobs = {job["name"]: job for job in replayed["jobs"]}
    sim_runs, replay_runs = runs(simulated), runs(replayed)
    for job in simulated["jobs"]:
        name = job["name"]
        other = replay_jobs.get(name)
        if other is None:
            differences.append(Difference(name, "job", "present", "absent"))
            continue
        if cut is not None and across_the_cut(job, other, cut, slack):
            continue
        for field in ("state", "cluster"):
            if job[field] != other[field]:
                differences.append(Difference(name, field, job[field], other[field]))
        if len(job["placements"]) != len(other["placements"]):
            differences.append(
                Difference(name, "placements", len(job["placements"]), len(other["placements"]))
            )
        if sim_runs[name] != replay_runs.get(name, 0):
            differences.append(Difference(name, "runs", sim_runs[name], replay_runs.get(name)))
        for field in ("submitted_at", "started_at", "finished_at"):
            a, b = job[field], other[field]
            if (a is None) != (b is None) or (
                a is not None and b is not None and abs(a - b) > slack
            ):
                differences.append(Difference(name, field, a, b))
    sim_order, replay_order = start_order(simulated), start_order(replayed)
    for queue in sim_order.keys() | replay_order.keys():
        # The order of the jobs both started: a job only one of them started is already a
        # difference of its own (its runs and state).
        ours, theirs = sim_order.get(queue, []), replay_order.get(queue, [])
        both = set(ours) & set(theirs)
        ours, theirs = [j for j in ours if j in both], [j for j in theirs if j in both]
        if ours != theirs:
            differences.append(Difference(f"queue {queue}", "start order", ours, theirs))
    return differences
