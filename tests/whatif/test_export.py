"""The live fleet exported as a scenario (``whatif/export.py``): it simulates without error,
its first cycle places what the service places next, and it carries no secret."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from flotilla.backends.sim import SimBackend
from flotilla.model import JobSpec, QueueSpec, QuotaSpec
from flotilla.model.loader import scenario_from_data
from flotilla.model.scenario import RuntimeSource
from flotilla.service.records import cluster_spec_from_inventory
from flotilla.sim import SimulationOptions, simulate
from flotilla.store import ACTIVE_JOB_STATES, JobState, SqlStore
from flotilla.whatif.export import ExportInput, export_scenario
from tests.service_builders import loop_over
from tests.timing import wait_until

NODES = [{"name": "n", "count": 2, "resources": {"cpu": 4, "memory": "16Gi"}}]


class Live:
    def __init__(self, root: Path) -> None:
        self.store = SqlStore.open(f"sqlite:///{root / 'flotilla.db'}")
        self.backend = SimBackend(cluster="east", nodes=NODES)
        self.store.upsert_cluster(
            cluster_spec_from_inventory("east", "sim", self.backend.inventory().nodes)
        )
        self.store.put_queue(QueueSpec(name="a", weight=2))
        self.store.put_queue(QueueSpec(name="b"))
        self.loop = loop_over(
            self.store, {"east": self.backend}, register=False, cycle_interval=0.05, replica="r"
        )

    def submit(self, name: str, queue: str, cpu: float, **extra: Any) -> str:
        spec = JobSpec.model_validate(
            {
                "name": name,
                "queue": queue,
                "tasks": [{"name": "main", "resources": {"cpu": cpu}}],
                "payload": {"sim": {"duration": 3600}},
                **extra,
            }
        )
        return self.store.submit_jobs([spec], owner="ana")[0]

    def active(self) -> set[str]:
        return {
            job.id for job in self.store.list_jobs(states=list(ACTIVE_JOB_STATES), limit=1000).jobs
        }

    def close(self) -> None:
        self.loop.close()
        self.backend.close()
        self.store.close()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    service = Live(tmp_path)
    yield service
    service.close()


def export(live: Live) -> dict[str, Any]:
    return export_scenario(ExportInput(live.store, datetime.now(UTC))).scenario


def first_cycle_placed(scenario: dict[str, Any]) -> set[str]:
    """Jobs the simulator's cycle at t=0 schedules, by service id (running ones excluded)."""
    parsed = scenario_from_data(scenario)
    ids = {entry.job: entry.id for entry in parsed.live.jobs} if parsed.live else {}
    running = {entry.job for entry in parsed.live.jobs if entry.running} if parsed.live else set()
    result = simulate(parsed, SimulationOptions(until=0))
    return {
        ids[event.job]
        for event in result.events
        if event.event == "scheduled" and event.time == 0 and event.job not in running
    }


def test_the_export_of_a_live_fleet_places_in_its_first_cycle_what_the_service_places_next(
    live: Live,
) -> None:
    early = [live.submit(f"early{i}", "b", 2) for i in range(3)]
    for _ in range(3):
        live.loop.cycle()
    assert set(early) <= live.active()  # 6 of 8 cores held by queue b
    later = [
        live.submit("big", "a", 4),  # cannot fit: 2 cores free
        live.submit("small-a", "a", 1),
        live.submit("small-b", "b", 1),
        live.submit("urgent", "b", 1, priority=100),
        live.submit("mid", "a", 2),
    ]
    scenario = export(live)
    simulated = first_cycle_placed(scenario)
    before = live.active()
    live.loop.cycle()
    served = live.active() - before
    assert served == simulated
    assert served and served < set(later)


def test_with_a_quota_tree_the_first_cycle_still_places_what_the_service_places(
    live: Live,
) -> None:
    """Queue a may use 3 cores of its quota (min 2, max 3), b borrows the rest."""
    quota = QuotaSpec.model_validate(
        {
            "name": "org",
            "max": {"cpu": 8},
            "children": [
                {"name": "qa", "min": {"cpu": 2}, "max": {"cpu": 3}},
                {"name": "qb", "min": {"cpu": 2}},
            ],
        }
    )
    live.store.put_quota(quota)
    live.store.put_queue(QueueSpec(name="a", weight=2, quota="qa"))
    live.store.put_queue(QueueSpec(name="b", quota="qb"))
    first = [live.submit("a0", "a", 2), live.submit("b0", "b", 2)]
    live.loop.cycle()
    assert set(first) <= live.active()
    for index in range(3):
        live.submit(f"a{index + 1}", "a", 1)
        live.submit(f"b{index + 1}", "b", 1)
    big = live.submit("b-big", "b", 3)
    simulated = first_cycle_placed(export(live))
    before = live.active()
    live.loop.cycle()
    served = live.active() - before
    assert served == simulated
    names = sorted(live.store.get_job(job).name for job in served)
    assert names[0] == "a1" and "a2" not in names  # a's quota ends at 3 cores
    assert big not in served


def test_running_jobs_keep_their_nodes_and_queued_ones_their_order(live: Live) -> None:
    first = live.submit("first", "a", 4)
    live.loop.cycle()
    queued = [live.submit(f"q{i}", "a", 4, max_runtime=600) for i in range(3)]
    scenario = export(live)
    parsed = scenario_from_data(scenario)
    assert parsed.live is not None
    by_id = {entry.id: entry for entry in parsed.live.jobs}
    assert by_id[first].running is not None
    assert by_id[first].running.cluster == "east"
    assert [entry.id for entry in parsed.live.jobs if entry.running is None] == queued
    assert by_id[queued[0]].estimate.source is RuntimeSource.MAX_RUNTIME
    assert by_id[queued[0]].estimate.seconds == 600
    assert by_id[first].estimate.source is RuntimeSource.NONE
    report = simulate(parsed, SimulationOptions(until=7200))
    started = {job.name: job.first_started_at for job in report.jobs}
    names = [by_id[job_id].job for job_id in queued]
    # ``first`` holds one node for ever (no estimate); the q's take the other one by one.
    assert [started[name] for name in names] == [0, 600, 1200]


def test_a_job_without_max_runtime_is_estimated_from_its_past_runs(live: Live) -> None:
    for _ in range(2):
        job = live.submit("train", "a", 1, payload={"sim": {"duration": 0.05}})
        wait_until(
            lambda: live.store.get_job(job).state is JobState.SUCCEEDED,  # noqa: B023
            "the run to end",
            20,
            0.02,
            live.loop.cycle,
        )
    waiting = live.submit("train", "a", 8)  # never fits: 2 nodes of 4 cores
    parsed = scenario_from_data(export(live))
    assert parsed.live is not None
    entry = next(e for e in parsed.live.jobs if e.id == waiting)
    assert entry.estimate.source is RuntimeSource.HISTORY
    assert entry.estimate.basis == "p50 of 2 runs of queue a, owner ana, name train"
    assert entry.estimate.seconds is not None and entry.estimate.seconds < 5


def test_the_export_carries_no_payload_and_no_secret(live: Live) -> None:
    live.submit(
        "secretive",
        "a",
        1,
        payload={"command": ["true"], "env": {"TOKEN": {"encrypted": "gAAAAsealed-value"}}},
    )
    text = yaml.safe_dump(export(live))
    assert "sealed-value" not in text
    assert "payload" not in text
    assert scenario_from_data(yaml.safe_load(text)).jobs[0].payload is None


def test_a_job_state_in_the_export_is_the_services(live: Live) -> None:
    job = live.submit("one", "a", 1)
    live.loop.cycle()
    parsed = scenario_from_data(export(live))
    assert parsed.live is not None
    assert JobState(parsed.live.jobs[0].state) in ACTIVE_JOB_STATES
    assert parsed.live.jobs[0].id == job
