"""Project the live fleet forward: when each waiting job is expected to start.

``project`` runs the simulator over one live export and answers, per job id, the virtual
second its first run is expected to start (``None``: not within the horizon).
``project_store`` does a whole projection of a store: one read, exported once per runtime
estimator, each simulated. A service runs it in a child process (``python -m
flotilla.whatif.project``, which reads one request as a JSON line on stdin and writes one
JSON line back for as long as its stdin stays open, with a store connection of its own), so
that neither the store's reads nor the simulation hold the interpreter of its scheduling loop.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TextIO

from flotilla.model.loader import scenario_from_data
from flotilla.model.scenario import RuntimeEstimate, RuntimeSource, Settings
from flotilla.sim import SimulationOptions, simulate
from flotilla.store import Store
from flotilla.whatif.estimator import EstimatorMethod
from flotilla.whatif.export import ExportInput, export_scenarios


@dataclass(frozen=True)
class ProjectionInput:
    scenario: Mapping[str, Any]
    """A live export (``export.py``)."""
    horizon: float
    """Virtual seconds to look ahead."""


@dataclass(frozen=True)
class ProjectedStarts:
    starts: dict[str, float | None]
    """Job id → seconds after the export its first run starts; None: not within the horizon.
    Jobs running at the export are left out."""
    wall_seconds: float


def project(request: ProjectionInput) -> ProjectedStarts:
    scenario = scenario_from_data(dict(request.scenario))
    live = scenario.live
    if live is None:
        return ProjectedStarts({}, 0.0)
    waiting = {entry.job: entry.id for entry in live.jobs if entry.running is None}
    result = simulate(scenario, SimulationOptions(until=request.horizon))
    starts: dict[str, float | None] = {}
    for job in result.jobs:
        job_id = waiting.get(job.name)
        if job_id is not None:
            starts[job_id] = job.first_started_at
    return ProjectedStarts(starts, result.wall_seconds)


@dataclass(frozen=True)
class StoreProjectionInput:
    store: Store
    now: datetime
    methods: Sequence[EstimatorMethod]
    horizon: float
    settings: Settings | None = None
    max_waiting: int | None = None
    pace: Callable[[], None] = field(default=lambda: None)


@dataclass(frozen=True)
class StoreProjection:
    starts: dict[str, dict[str, float | None]]
    """By method name: job id → seconds after ``now`` it starts (None: beyond the horizon)."""
    basis: dict[str, str]
    """By method name: the runtimes it assumed, in words."""
    runtimes: dict[str, RuntimeEstimate]
    """Each waiting job's runtime estimate by the first method."""


def project_store(request: StoreProjectionInput) -> StoreProjection:
    export = ExportInput(
        request.store,
        request.now,
        request.methods[0],
        request.settings,
        pace=request.pace,
        max_waiting=request.max_waiting,
    )
    starts: dict[str, dict[str, float | None]] = {}
    basis: dict[str, str] = {}
    runtimes: dict[str, RuntimeEstimate] = {}
    for method, exported in export_scenarios(export, request.methods).items():
        answer = project(ProjectionInput(exported.scenario, request.horizon))
        if not runtimes:
            runtimes = {job_id: exported.estimates[job_id] for job_id in answer.starts}
        starts[method.value] = answer.starts
        basis[method.value] = runtime_basis(exported.estimates.values())
    return StoreProjection(starts, basis, runtimes)


def runtime_basis(estimates: Iterable[RuntimeEstimate]) -> str:
    """``runtimes from history`` / ``from max_runtime`` / both, and jobs without one."""
    sources = [estimate.source for estimate in estimates]
    used = [
        words
        for source, words in (
            (RuntimeSource.HISTORY, "history"),
            (RuntimeSource.MAX_RUNTIME, "max_runtime"),
        )
        if source in sources
    ]
    text = "runtimes from " + " and ".join(used) if used else "no runtime known"
    unknown = sources.count(RuntimeSource.NONE)
    if used and unknown:
        text += f"; {unknown} job(s) without one run past the horizon"
    return text


def serve(lines: Iterable[str], out: TextIO) -> None:
    """Answer one request per line with one line each, until the input ends: a child
    process that imports the engine once and keeps one store connection per database.

    A request: ``{"db": URL, "now": ISO, "methods": [...], "horizon": S, "settings": {...}
    | null, "max_waiting": N | null}``; the answer: ``{"starts", "basis", "runtimes"}`` or
    ``{"error": TEXT}``."""
    from flotilla.store import SqlStore

    stores: dict[str, SqlStore] = {}
    try:
        for line in lines:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
                url = str(request["db"])
                if url not in stores:
                    stores[url] = SqlStore.open(url)
                settings = request.get("settings")
                answer = project_store(
                    StoreProjectionInput(
                        store=stores[url],
                        now=datetime.fromisoformat(request["now"]),
                        methods=[EstimatorMethod(name) for name in request["methods"]],
                        horizon=float(request["horizon"]),
                        settings=None if settings is None else Settings.model_validate(settings),
                        max_waiting=request.get("max_waiting"),
                    )
                )
                reply: dict[str, Any] = {
                    "starts": answer.starts,
                    "basis": answer.basis,
                    "runtimes": {
                        job_id: estimate.model_dump(mode="json")
                        for job_id, estimate in answer.runtimes.items()
                    },
                }
            except Exception as error:  # one bad projection must not end the worker
                reply = {"error": f"{type(error).__name__}: {error}"}
            out.write(json.dumps(reply) + "\n")
            out.flush()
    finally:
        for store in stores.values():
            store.close()


def main() -> None:
    serve(sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
