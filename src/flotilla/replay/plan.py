"""A scenario as something a live service can be given: a fleet of ``sim`` clusters and a
timeline of submissions and cancels, every time divided by the replay's speed.

The service runs in wall time; a scenario speaks in its own seconds. At speed N one wall
second is N scenario seconds: the fleet's ``cycle_interval`` and each cluster's
``startup_delay`` are divided by N, and so is each job's ``duration``, which travels in the
job's payload (``{"sim": {"duration": …}}``) for the ``sim`` backend to end the run after it.
Gang timeouts, retry delays and ``max_runtime`` (durations of the job spec) and the fleet's
``usage_half_life`` (fair share's memory) are read by the service as wall seconds: they are
divided by N too, so that every clock of the scenario runs at one speed. The job keeps its
(scaled) ``duration``: the engine's expected runtime, which EASY backfill's reservations are
made of.

A cluster's ``fail_at`` is a step of its own: the fleet is applied again with that
cluster's ``sim`` backend told to fail (``failing_fleet``: its ``fail_at`` setting, a wall
time, from which it stops answering), and the service loses the cluster after its heartbeat
timeout, which the plan sets (``settings.heartbeat_timeout``, scaled; half a cycle unless
the scenario sets one) so that the service loses it within a cycle, as the simulator does at
once. As a step, it waits for the service like the others: a lagging service sees the
failure late, never before the placements the simulator made ahead of it.

The plan also carries the simulation's own course (``Milestones``: when the simulator placed
and ended each job). The service's latencies (a cycle, a dispatch, a poll) are wall time, and
on a loaded machine they outgrow the scenario's gaps at any speed; so a step is taken only
once the service has done what the simulator had done before that step's time (its
placements and ends), for at most a patience: a lagging service sees the scenario's events
late, never in another order, and a service that disagrees still shows the difference (it
never gets there; the step goes ahead when the patience is spent).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flotilla.model.base import MAX_SECONDS
from flotilla.model.job import JobSpec
from flotilla.model.scenario import Scenario
from flotilla.sim.report import build_report
from flotilla.sim.simulator import simulate

FOREVER = MAX_SECONDS
"""Wall seconds a job without ``duration`` runs: past the end of any replay, as a scenario
job without ``duration`` runs past the end of its simulation (the longest duration the API
accepts: ten years)."""


@dataclass(frozen=True)
class PlannedJob:
    """One job of the scenario (``count`` expanded, as the report lists them)."""

    name: str
    queue: str
    submit_at: float
    duration: float | None
    cancel_at: float | None
    priority: int


@dataclass
class Step:
    """Something to do at scenario time ``at``: fail clusters (first, as the simulator's
    cluster failures come before its submissions of the same time), submit jobs (one
    request, file order, as the simulator's submissions of one time are sequenced), cancel,
    hold or release jobs (in that order, as the simulator's timers)."""

    at: float
    fail: list[str] = field(default_factory=list)
    submit: list[dict[str, Any]] = field(default_factory=list)
    cancel: list[PlannedJob] = field(default_factory=list)
    hold: list[PlannedJob] = field(default_factory=list)
    release: list[PlannedJob] = field(default_factory=list)


@dataclass(frozen=True)
class Milestones:
    """The simulation's course, job by job: the scenario times the simulator placed each job
    at (its ``scheduled`` events) and the time and kind of its end."""

    leases: dict[str, list[float]] = field(default_factory=dict)
    ends: dict[str, tuple[float, str]] = field(default_factory=dict)

    @classmethod
    def of(cls, report: Mapping[str, Any]) -> Milestones:
        """From ``flotilla simulate``'s report (its ``events``)."""
        found = cls()
        for event in report["events"]:
            kind, name = event["event"], event["job"]
            if kind == "scheduled":
                found.leases.setdefault(name, []).append(float(event["time"]))
            elif kind in ("succeeded", "failed", "cancelled"):
                found.ends[name] = (float(event["time"]), kind)
        return found

    def due(self, at: float) -> dict[str, tuple[int, bool]]:
        """Per job, what the simulator had done before its step at ``at``: how many times it
        had placed the job, and whether the job had ended. The simulator's cycle at ``at``
        comes after that time's submissions, cancels and cluster failures, so what it did at
        ``at`` is not yet due; only runs ending at ``at`` by their duration (freed before
        the cycle) are."""
        wanted: dict[str, tuple[int, bool]] = {}
        for name, times in self.leases.items():
            placed = sum(1 for time in times if time < at)
            end = self.ends.get(name)
            ended = end is not None and (end[0] < at or (end[0] == at and end[1] == "succeeded"))
            if placed or ended:
                wanted[name] = (placed, ended)
        return wanted


@dataclass(frozen=True)
class ReplayPlan:
    scenario: Scenario
    speed: float
    fleet: dict[str, Any]
    steps: list[Step]
    jobs: list[PlannedJob]
    unsupported: list[str]
    """Scenario fields the replay cannot give a service, each with why (shown as warnings)."""
    milestones: Milestones | None = None
    """The simulation's course, which paces the steps (None: steps by the clock alone)."""

    def wall(self, scenario_seconds: float) -> float:
        return scenario_seconds / self.speed

    def failing_fleet(self, failed: dict[str, float]) -> dict[str, Any]:
        """The fleet document with the clusters of ``failed`` (name → the wall time, epoch
        seconds, it failed at) failed: their ``sim`` backends stop answering from then on."""
        clusters = [
            {**cluster, "settings": {**cluster["settings"], "fail_at": at}}
            if (at := failed.get(cluster["name"])) is not None
            else cluster
            for cluster in self.fleet["clusters"]
        ]
        return {**self.fleet, "clusters": clusters}

    def scenario_time(self, wall_seconds: float) -> float:
        return wall_seconds * self.speed

    @property
    def max_time(self) -> float | None:
        return self.scenario.settings.max_time


def plan_replay(scenario: Scenario, speed: float, *, paced: bool = True) -> ReplayPlan:
    """The fleet document and timeline of ``scenario`` at ``speed`` (> 0); ``paced``: with
    the simulation's course (``Milestones``, from simulating the scenario)."""
    if speed <= 0:
        raise ValueError("speed must be > 0")
    unsupported: list[str] = []
    steps: dict[float, Step] = {}
    for cluster in scenario.clusters:
        if cluster.fail_at is not None:
            steps.setdefault(cluster.fail_at, Step(cluster.fail_at)).fail.append(cluster.name)
    jobs: list[PlannedJob] = []
    classes = {pc.name: pc.value for pc in scenario.priority_classes}
    for spec in scenario.jobs:
        steps.setdefault(spec.submit_at, Step(spec.submit_at)).submit.append(
            submission(spec, speed)
        )
        priority = spec.priority if spec.priority is not None else 0
        if spec.priority_class is not None:
            priority = classes.get(spec.priority_class, priority)
        for name in spec.job_names():
            job = PlannedJob(
                name, spec.queue, spec.submit_at, spec.duration, spec.cancel_at, priority
            )
            jobs.append(job)
            if spec.cancel_at is not None:
                steps.setdefault(spec.cancel_at, Step(spec.cancel_at)).cancel.append(job)
            if spec.hold_at is not None:
                steps.setdefault(spec.hold_at, Step(spec.hold_at)).hold.append(job)
            if spec.release_at is not None:
                steps.setdefault(spec.release_at, Step(spec.release_at)).release.append(job)
    return ReplayPlan(
        scenario=scenario,
        speed=speed,
        fleet=fleet_document(scenario, speed),
        steps=[steps[at] for at in sorted(steps)],
        jobs=jobs,
        unsupported=unsupported,
        milestones=Milestones.of(build_report(simulate(scenario))) if paced else None,
    )


def fleet_document(scenario: Scenario, speed: float) -> dict[str, Any]:
    """The scenario's fleet part as a fleet file whose clusters are ``sim`` clusters
    simulating the scenario's nodes."""
    settings = scenario.settings.model_dump(mode="json")
    settings["cycle_interval"] = scenario.settings.cycle_interval / speed
    if settings.get("usage_half_life") is not None:  # usage decays in the service's wall time
        settings["usage_half_life"] = settings["usage_half_life"] / speed
    settings.pop("max_time", None)  # the replay stops there itself
    heartbeat = scenario.settings.heartbeat_timeout
    if heartbeat is not None or any(c.fail_at is not None for c in scenario.clusters):
        # The simulator loses a failed cluster at once: the service within a cycle.
        if heartbeat is None:
            heartbeat = scenario.settings.cycle_interval / 2
        settings["heartbeat_timeout"] = heartbeat / speed
    clusters = []
    for cluster in scenario.clusters:
        clusters.append(
            {
                "name": cluster.name,
                "backend": "sim",
                "settings": {
                    "startup_delay": cluster.startup_delay / speed,
                    # Named here too, so that a cluster whose nodes change between two
                    # replays gets a new backend (settings are what a reload compares).
                    "nodes": [group.model_dump(mode="json") for group in cluster.nodes],
                },
                "labels": dict(cluster.labels),
                "cost": dict(cluster.cost),
                "gpu_sharing": cluster.gpu_sharing.value,
                "topology": list(cluster.topology),
                "nodes": [group.model_dump(mode="json") for group in cluster.nodes],
            }
        )
    return {
        "name": scenario.name,
        "settings": settings,
        "priority_classes": [pc.model_dump(mode="json") for pc in scenario.priority_classes],
        "clusters": clusters,
        "quotas": [quota.model_dump(mode="json") for quota in scenario.quotas],
        "queues": [queue.model_dump(mode="json") for queue in scenario.queues],
    }


def submission(spec: JobSpec, speed: float) -> dict[str, Any]:
    """The job as the service's API takes it: the scenario-only fields gone, its duration
    in the payload for the ``sim`` backend, its wall-clock durations scaled."""
    body = spec.model_dump(mode="json", exclude_none=True)
    for scenario_only in ("submit_at", "cancel_at", "hold_at", "release_at"):
        body.pop(scenario_only, None)
    duration = FOREVER if spec.duration is None else spec.duration / speed
    if spec.duration is not None:
        # The engine's expected runtime (EASY backfill's reservations), as in the simulator.
        body["duration"] = duration
    payload = dict(body.get("payload") or {})
    payload["sim"] = {**payload.get("sim", {}), "duration": duration}
    body["payload"] = payload
    # A scenario job no cluster can ever hold stays queued in the simulator (with its reason);
    # the service refuses such a job unless told to keep it.
    body["hold_if_unfit"] = True
    if spec.max_runtime is not None:
        body["max_runtime"] = spec.max_runtime / speed
    if spec.gang is not None:
        body["gang"]["timeout"] = spec.gang.timeout / speed
    if spec.retry is not None:
        body["retry"]["delay"] = spec.retry.delay / speed
        body["retry"]["max_delay"] = spec.retry.max_delay / speed
    if spec.min_runtime is not None:
        body["min_runtime"] = spec.min_runtime / speed
    if spec.checkpoint_every is not None:
        body["checkpoint_every"] = spec.checkpoint_every / speed
    if spec.preemption is not None:
        body["preemption"]["grace"] = spec.preemption.grace / speed
    return body
