"""The export carries issue 28's policy fields (queues' ``owners``, clusters' ``topology``,
jobs' ``topology``, ``preemption``, ``min_runtime``, ``checkpoint_every``), so the what-if
projects them: its first cycle places what the service places next. A job's ``user`` is kept
(it was overwritten with its submitter, so every job of a queue had one owner)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flotilla.backends.sim import SimBackend
from flotilla.model import JobSpec, QueueSpec
from flotilla.model.loader import scenario_from_data
from flotilla.service.records import cluster_spec_from_inventory
from flotilla.sim import SimulationOptions, simulate
from flotilla.store import ACTIVE_JOB_STATES, CheckpointReport, SqlStore
from flotilla.whatif.export import ExportInput, export_scenario
from tests.service_builders import loop_over

RACKS = [
    {"name": "r1-", "count": 2, "resources": {"cpu": 4}, "labels": {"rack": "r1"}},
    {"name": "r2-", "count": 2, "resources": {"cpu": 4}, "labels": {"rack": "r2"}},
]
SAVES_WORK = {
    "preemption": {"grace": 30, "signal": "SIGUSR1"},
    "min_runtime": 60,
    "checkpoint_every": 300,
}


class Live:
    def __init__(self, root: Path) -> None:
        self.store = SqlStore.open(f"sqlite:///{root / 'flotilla.db'}")
        self.backend = SimBackend(cluster="east", nodes=RACKS)
        spec = cluster_spec_from_inventory("east", "sim", self.backend.inventory().nodes)
        self.store.upsert_cluster(spec.model_copy(update={"topology": ["rack"]}))
        owners = {"max_running_jobs": 1, "limits": {"u1": {"max_running_jobs": 2}}}
        self.store.put_queue(QueueSpec.model_validate({"name": "a", "owners": owners}))
        self.loop = loop_over(
            self.store, {"east": self.backend}, register=False, cycle_interval=0.05, replica="r"
        )

    def submit(self, name: str, user: str, cpu: float, replicas: int = 1, **extra: Any) -> str:
        spec = JobSpec.model_validate(
            {
                "name": name,
                "queue": "a",
                "user": user,
                "tasks": [{"name": "main", "replicas": replicas, "resources": {"cpu": cpu}}],
                "payload": {"sim": {"duration": 3600}},
                **extra,
            }
        )
        return self.store.submit_jobs([spec], owner="admin")[0]

    def active(self) -> set[str]:
        jobs = self.store.list_jobs(states=list(ACTIVE_JOB_STATES), limit=1000).jobs
        return {job.id for job in jobs}

    def close(self) -> None:
        self.loop.close()
        self.backend.close()
        self.store.close()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    service = Live(tmp_path)
    yield service
    service.close()


def first_cycle_placed(scenario: dict[str, Any]) -> set[str]:
    parsed = scenario_from_data(scenario)
    assert parsed.live is not None
    ids = {entry.job: entry.id for entry in parsed.live.jobs}
    result = simulate(parsed, SimulationOptions(until=0))
    return {ids[e.job] for e in result.events if e.event == "scheduled" and e.time == 0}


def test_the_export_carries_the_policy_fields_and_places_what_the_service_places(
    live: Live,
) -> None:
    gang = live.submit("gang", "carol", 3, replicas=2, topology={"required": "rack"}, **SAVES_WORK)
    ana = [live.submit(f"ana{i}", "ana", 1) for i in range(3)]
    bob = live.submit("bob0", "bob", 1)
    too_wide = live.submit("wide", "dave", 3, replicas=3, topology={"required": "rack"})
    scenario = export_scenario(ExportInput(live.store, datetime.now(UTC))).scenario
    (queue,) = scenario["queues"]
    assert queue["owners"]["max_running_jobs"] == 1
    assert queue["owners"]["limits"]["u1"]["max_running_jobs"] == 2
    assert scenario["clusters"][0]["topology"] == ["rack"]
    by_name = {job["name"].split(".")[0]: job for job in scenario["jobs"]}
    assert by_name["gang"]["topology"] == {"required": "rack"}
    assert by_name["gang"]["preemption"]["signal"] == "SIGUSR1"
    assert (by_name["gang"]["min_runtime"], by_name["gang"]["checkpoint_every"]) == (60, 300)
    simulated = first_cycle_placed(scenario)
    live.loop.cycle()
    served = live.active()
    assert served == simulated
    assert gang in served and ana[0] in served and bob in served  # one rack; one job per owner
    assert not {ana[1], ana[2], too_wide} & served


def test_a_running_jobs_reported_checkpoint_is_exported(live: Live) -> None:
    job = live.submit("train", "ana", 1)
    live.loop.cycle()
    run = live.store.get_job(job).run
    assert run is not None
    now = datetime.now(UTC)
    live.store.record_checkpoints([CheckpointReport(job, run.id, now - timedelta(seconds=90))])
    parsed = scenario_from_data(export_scenario(ExportInput(live.store, now)).scenario)
    assert parsed.live is not None
    (entry,) = parsed.live.jobs
    assert entry.running is not None and entry.running.since_checkpoint == 90
