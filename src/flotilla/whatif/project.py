"""Project an exported scenario forward: when each waiting job is expected to start.

``project`` runs the simulator over a live export and answers, per job id, the virtual
second its first run is expected to start (``None``: not within the horizon). Run it in a
child process (``python -m flotilla.whatif.project`` reads one request as a JSON line on
stdin and writes one JSON line back, for as long as its stdin stays open) so that a
projection never holds the interpreter of a service's scheduling loop.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from flotilla.model.loader import scenario_from_data
from flotilla.sim import SimulationOptions, simulate


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


def serve(lines: Iterable[str], out: TextIO) -> None:
    """Answer one request per line (``{"scenario", "horizon"}``) with one line each, until
    the input ends: a child process that imports the engine once."""
    for line in lines:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            answer = project(ProjectionInput(request["scenario"], float(request["horizon"])))
            reply: dict[str, Any] = {"starts": answer.starts, "wall_seconds": answer.wall_seconds}
        except Exception as error:  # one bad export must not end the worker
            reply = {"error": f"{type(error).__name__}: {error}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


def main() -> None:
    serve(sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
