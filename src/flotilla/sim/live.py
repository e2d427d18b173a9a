"""A live export's running jobs (``scenario.live``): placed where the service runs them, at
t=0, before the first cycle, so the first round sees the fleet as the service does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flotilla.framework.interfaces import Assignment
from flotilla.model.errors import SpecError

if TYPE_CHECKING:
    from flotilla.sim.simulator import Simulator


def start_live_runs(simulator: Simulator) -> None:
    """Place every ``live.jobs[].running`` job on its recorded nodes (SpecError naming the
    field when a placement no longer fits its node)."""
    live = simulator.scenario.live
    if live is None:
        return
    for index, entry in enumerate(live.jobs):
        if entry.running is None:
            continue
        job = simulator.job_by_name[entry.job]
        cluster = simulator.cluster_by_name[entry.running.cluster]
        data = {"cluster": cluster.name, "placements": entry.running.placements}
        assignment = Assignment.from_json(data, job.job, cluster)
        where = f"live.jobs[{index}].running"
        if assignment is None:
            raise SpecError([f"{where}.placements: a task or node of it is not in the scenario"])
        unfit = simulator.room_for(assignment)
        if unfit is not None:
            raise SpecError([f"{where}.placements: {unfit}"])
        simulator.place(job, assignment, 0.0)
        checkpoint = entry.running.since_checkpoint
        simulator.backdate(job, entry.running.elapsed, None if checkpoint is None else -checkpoint)
