"""The live fleet and its workload as a scenario (``flotilla fleet export --scenario``).

What the engine sees now, as a file the simulator runs: the clusters with their current
nodes (the store's records, which the scheduler keeps from each backend's inventory), the
queues, the quota tree, the priority classes and settings of the fleet in force, and every
job not yet ended — running ones placed where they run (``live.jobs[].running``), waiting
ones in submission order, held ones (a retry backoff: submitted when it ends; dependencies:
``depends_on`` the exported jobs they wait for). Each job's ``duration`` comes from the
runtime estimator (``estimator.py``), its source recorded in ``live.jobs[].estimate``.

Never exported: payloads (commands, environments and their sealed secrets) and cluster
settings (secret references included) — the simulator needs none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from flotilla.model.scenario import (
    LiveJob,
    LiveRun,
    LiveState,
    RuntimeEstimate,
    Settings,
)
from flotilla.store import (
    ACTIVE_JOB_STATES,
    WAITING_JOB_STATES,
    JobRecord,
    JobState,
    Store,
)
from flotilla.whatif.estimator import EstimateInput, EstimatorMethod, PastRun, RuntimeHistory

HISTORY_JOBS = 2000
"""The most recent succeeded jobs the history estimate learns from."""
PAGE = 500
LIVE_STATES = (*sorted(WAITING_JOB_STATES), *sorted(ACTIVE_JOB_STATES))
MIN_REMAINING = 1.0
"""Seconds left to a running job whose estimate it has already reached (it ends soon)."""


def _no_pause() -> None:
    return None


@dataclass(frozen=True)
class ExportInput:
    store: Store
    now: datetime
    """The moment the export describes (aware, UTC): t=0 of the scenario."""
    method: EstimatorMethod = EstimatorMethod.AUTO
    settings: Settings | None = None
    """Scheduling settings when no fleet file is in force (the embedded default)."""
    pace: Callable[[], None] = _no_pause
    """Called between pages read from the store: the service's ``Precedence.pace``, so an
    export yields to urgent work (a cancel, a request) as a scheduling round does."""
    max_waiting: int | None = None
    """Export at most this many waiting jobs (the first in submission order); None: all."""


@dataclass(frozen=True)
class LiveExport:
    scenario: dict[str, Any]
    """The scenario as JSON data (valid: ``scenario_from_data`` accepts it)."""
    names: Mapping[str, str] = field(default_factory=dict)
    """Job id → its name in the scenario."""
    estimates: Mapping[str, RuntimeEstimate] = field(default_factory=dict)
    """Job id → its runtime estimate."""


def learn_history(
    store: Store, limit: int = HISTORY_JOBS, pace: Callable[[], None] = _no_pause
) -> RuntimeHistory:
    """The runtimes of the most recent succeeded jobs, grouped for the estimator."""
    runs: list[PastRun] = []
    after: int | None = None
    while len(runs) < limit:
        pace()
        page = store.list_jobs(
            states=[JobState.SUCCEEDED], newest_first=True, after=after, limit=PAGE
        )
        for job in page.jobs:
            run = job.run
            if run is None or run.finished_at is None:
                continue
            began = run.started_at or run.created_at
            seconds = (run.finished_at - began).total_seconds()
            if seconds >= 0:
                runs.append(PastRun(job.queue, job.owner, job.name, seconds))
        if page.next_cursor is None:
            break
        after = page.next_cursor
    return RuntimeHistory.of(runs[:limit])


def live_jobs(store: Store, pace: Callable[[], None] = _no_pause) -> Iterator[JobRecord]:
    """Every job not ended, in submission order."""
    after: int | None = None
    while True:
        pace()
        page = store.list_jobs(states=list(LIVE_STATES), after=after, limit=PAGE)
        yield from page.jobs
        if page.next_cursor is None:
            return
        after = page.next_cursor


def export_scenario(request: ExportInput) -> LiveExport:
    """The live fleet and workload with runtimes from ``request.method``."""
    return export_scenarios(request, (request.method,))[request.method]


def export_scenarios(
    request: ExportInput, methods: Sequence[EstimatorMethod]
) -> dict[EstimatorMethod, LiveExport]:
    """One read of the store, exported once per runtime estimator: the same jobs in each."""
    store = request.store
    record = store.get_fleet()
    document: Mapping[str, Any] = record.document if record is not None else {}
    settings = _settings(document, request.settings)
    order = [cluster["name"] for cluster in document.get("clusters", [])]
    position = {name: index for index, name in enumerate(order)}
    clusters = sorted(
        (c for c in store.list_clusters() if c.spec.get("nodes") and c.state == "ready"),
        key=lambda c: position.get(c.name, len(position)),
    )
    exported_clusters = {c.name for c in clusters}
    history = learn_history(store, pace=request.pace)
    jobs = _within(live_jobs(store, request.pace), request.max_waiting)
    base: dict[str, Any] = {
        "name": f"live-{document.get('name', 'fleet')}",
        "description": f"the live fleet and its workload at {request.now.isoformat()}",
        "settings": settings.model_dump(mode="json", exclude={"max_time"}),
        "priority_classes": list(document.get("priority_classes", [])),
        "clusters": [dict(c.spec) for c in clusters],
        "quotas": [q.model_dump(mode="json", exclude_none=True) for q in store.list_quotas()],
        "queues": [q.model_dump(mode="json", exclude_none=True) for q in store.list_queues()],
    }
    live_state = _Live(request.now, record.version if record is not None else 0, exported_clusters)
    return {
        method: _export(base, jobs, history, method, live_state)
        for method in dict.fromkeys(methods)
    }


@dataclass(frozen=True)
class _Live:
    now: datetime
    fleet_version: int
    clusters: set[str]


def _export(
    base: Mapping[str, Any],
    jobs: list[JobRecord],
    history: RuntimeHistory,
    method: EstimatorMethod,
    at: _Live,
) -> LiveExport:
    names = {job.id: _name(job) for job in jobs}
    specs: list[dict[str, Any]] = []
    live: list[LiveJob] = []
    estimates: dict[str, RuntimeEstimate] = {}
    for job in jobs:
        running = _running(job, at.now, at.clusters)
        if job.state in ACTIVE_JOB_STATES and running is None:
            continue  # on a cluster not exported (unreachable): the service requeues it
        elapsed = running.elapsed if running is not None else 0.0
        estimate = history.estimate(
            EstimateInput(job.queue, job.owner, job.name, job.spec.max_runtime, elapsed), method
        )
        estimates[job.id] = estimate
        specs.append(_job(job, at.now, names, estimate, running))
        live.append(
            LiveJob(
                job=names[job.id],
                id=job.id,
                state=job.state.value,
                estimate=estimate,
                running=running,
            )
        )
    state = LiveState(exported_at=at.now.isoformat(), fleet_version=at.fleet_version, jobs=live)
    scenario = {
        **base,
        "jobs": specs,
        "live": state.model_dump(mode="json", exclude_none=True),
    }
    return LiveExport(scenario=scenario, names=names, estimates=estimates)


def _within(jobs: Iterator[JobRecord], max_waiting: int | None) -> list[JobRecord]:
    """Every active job, and the waiting ones up to ``max_waiting``."""
    kept: list[JobRecord] = []
    waiting = 0
    for job in jobs:
        if job.state in WAITING_JOB_STATES:
            if max_waiting is not None and waiting >= max_waiting:
                continue
            waiting += 1
        kept.append(job)
    return kept


def _settings(document: Mapping[str, Any], given: Settings | None) -> Settings:
    if "settings" in document:
        return Settings.model_validate(document["settings"])
    return given or Settings()


def _name(job: JobRecord) -> str:
    """Unique in the scenario: the job's name and the start of its id."""
    return f"{job.name[:240]}.{job.id[:8]}"


def _running(job: JobRecord, now: datetime, clusters: set[str]) -> LiveRun | None:
    run = job.run
    if job.state not in ACTIVE_JOB_STATES or run is None or run.cluster not in clusters:
        return None
    placements = list(run.assignment.get("placements") or [])
    if not placements:
        return None
    elapsed = 0.0
    if run.started_at is not None:
        elapsed = max(0.0, (now - run.started_at).total_seconds())
    since = None
    if run.last_checkpoint_at is not None:
        since = max(0.0, (now - run.last_checkpoint_at).total_seconds())
    return LiveRun(
        cluster=run.cluster, elapsed=elapsed, since_checkpoint=since, placements=placements
    )


_DROPPED = (
    "payload",
    "hold_if_unfit",
    "array",
    "count",
    "priority_class",
    "cancel_at",
    "hold_at",
    "release_at",
)


def _job(
    job: JobRecord,
    now: datetime,
    names: Mapping[str, str],
    estimate: RuntimeEstimate,
    running: LiveRun | None,
) -> dict[str, Any]:
    spec = job.spec.model_dump(mode="json", exclude_none=True)
    for key in _DROPPED:
        spec.pop(key, None)
    spec["name"] = names[job.id]
    spec["queue"] = job.queue
    spec["priority"] = job.priority
    spec["preemptible"] = job.spec.preemptible if job.spec.preemptible is not None else True
    if job.spec.user is None and job.owner is not None:
        spec["user"] = job.owner  # the owner the service counts: its user, else the submitter
    submit_at = 0.0
    if job.state is JobState.QUEUED and job.not_before is not None:
        submit_at = max(0.0, (job.not_before - now).total_seconds())  # a retry backoff
    spec["submit_at"] = submit_at
    spec.pop("duration", None)
    if estimate.seconds is not None:
        left = estimate.seconds
        if running is not None:
            left = max(MIN_REMAINING, estimate.seconds - running.elapsed)
        spec["duration"] = left
    spec["depends_on"] = [
        {"job": names[dependency.job_id], "condition": dependency.condition.value}
        for dependency in job.dependencies
        if dependency.job_id in names  # one that ended: met, or the service fails the job
    ]
    return spec
