"""Every scheduling setting the simulator honours, the service honours too: the same fleet
file's ``settings`` drive a real SchedulingLoop over SQLite (sim clusters, fake runs)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flotilla.model.scenario import Mode
from flotilla.store import JobState
from tests.fleet.support import FleetService, fleet_data, job, sim_cluster, sqlite_url


@pytest.fixture
def service(tmp_path: Path) -> Iterator[FleetService]:
    running = FleetService(sqlite_url(tmp_path))
    yield running
    running.close()


def start(service: FleetService, *clusters: dict[str, Any], **kwargs: Any) -> None:
    service.apply(fleet_data(*clusters, **kwargs))
    service.start()


RUNNING = (JobState.PENDING, JobState.RUNNING)


@pytest.mark.parametrize(
    ("strategy", "cluster"), [("cluster-only", "pricey"), ("cost-optimized", "cheap")]
)
def test_the_assignment_strategy_picks_the_cluster(
    service: FleetService, strategy: str, cluster: str
) -> None:
    start(
        service,
        sim_cluster("pricey", cost={"cpu": 1.0}),
        sim_cluster("cheap", cost={"cpu": 0.1}),
        assignment_strategy=strategy,
    )
    [train] = service.submit(job("train"))
    service.cycles()
    assert service.cluster_of(train) == cluster


@pytest.mark.parametrize("preemption", [True, False])
def test_priority_preemption_follows_the_setting(service: FleetService, preemption: bool) -> None:
    start(service, sim_cluster("c1", cpu=2), priority_preemption=preemption)
    [low] = service.submit(job("low", 2, priority=0))
    service.cycles()
    assert service.state(low) in RUNNING
    [high] = service.submit(job("high", 2, priority=10))
    service.cycles(5)
    if preemption:
        assert service.state(high) in RUNNING
        assert service.state(low) in (JobState.PREEMPTED, JobState.QUEUED)
    else:
        assert service.state(high) is JobState.QUEUED
        assert service.state(low) in RUNNING


@pytest.mark.parametrize("preemption", [True, False])
def test_fair_share_preemption_follows_the_setting(service: FleetService, preemption: bool) -> None:
    start(
        service,
        sim_cluster("c1", cpu=2),
        queues=[{"name": "a"}, {"name": "b"}],
        fair_share_preemption=preemption,
    )
    hogs = service.submit(job("hog-0", queue="a"), job("hog-1", queue="a"))
    service.cycles()
    assert all(service.state(hog) in RUNNING for hog in hogs)
    [fair] = service.submit(job("fair", queue="b"))
    service.cycles(5)
    assert (service.state(fair) in RUNNING) is preemption
    evicted = [hog for hog in hogs if service.state(hog) not in RUNNING]
    assert len(evicted) == (1 if preemption else 0)


@pytest.mark.parametrize(
    ("queueing", "small_runs"), [("strict-fifo", False), ("best-effort-fifo", True)]
)
def test_queueing_decides_whether_a_small_job_passes_a_blocked_head(
    service: FleetService, queueing: str, small_runs: bool
) -> None:
    start(service, sim_cluster("c1", cpu=2), queueing=queueing)
    [running] = service.submit(job("running", 1))
    service.cycles()
    [head, small] = service.submit(job("head", 2), job("small", 1))
    service.cycles()
    assert service.state(running) in RUNNING
    assert service.state(head) is JobState.QUEUED
    assert (service.state(small) in RUNNING) is small_runs


@pytest.mark.parametrize(("owner_limit_stop", "bob_runs"), [(False, True), (True, False)])
def test_owner_limit_stop_decides_whether_an_owner_at_its_limit_stops_a_strict_queue(
    service: FleetService, owner_limit_stop: bool, bob_runs: bool
) -> None:
    queues = [{"name": "default", "owners": {"order": "queue", "max_running_jobs": 1}}]
    start(
        service,
        sim_cluster("c1", cpu=8),
        queues=queues,
        queueing="strict-fifo",
        owner_limit_stop=owner_limit_stop,
    )
    [first, second] = service.submit(job("a-0", 1, user="alice"), job("a-1", 1, user="alice"))
    service.cycles()
    [bob] = service.submit(job("bob", 1, user="bob"))
    service.cycles()
    assert service.state(first) in RUNNING
    assert service.state(second) is JobState.QUEUED
    assert (service.state(bob) in RUNNING) is bob_runs


@pytest.mark.parametrize(
    ("queueing", "small_runs"), [("backfill", False), ("best-effort-fifo", True)]
)
def test_backfill_keeps_a_reservation_from_jobs_that_would_delay_it(
    service: FleetService, queueing: str, small_runs: bool
) -> None:
    start(service, sim_cluster("c1", cpu=4), queueing=queueing)
    service.submit(job("running", 2, max_runtime=600))
    service.cycles()
    # The head needs the whole node: under backfill it holds a reservation from when the
    # running job must end; a job without max_runtime would never end, so it may not start.
    [head, endless] = service.submit(job("head", 4), job("endless", 1))
    service.cycles()
    assert service.state(head) is JobState.QUEUED
    assert (service.state(endless) in RUNNING) is small_runs
    if not small_runs:
        assert "backfill" in (service.loop.pending_reason(head) or "")  # type: ignore[union-attr]


@pytest.mark.parametrize(("fair_share", "b_runs"), [("drf", True), ("fifo", False)])
def test_fair_share_decides_which_queue_goes_first(
    service: FleetService, fair_share: str, b_runs: bool
) -> None:
    start(
        service,
        sim_cluster("c1", cpu=2),
        queues=[{"name": "a"}, {"name": "b"}],
        fair_share=fair_share,
    )
    [first] = service.submit(job("a-0", queue="a"))
    service.cycles()
    service.submit(job("a-1", queue="a"))
    [late] = service.submit(job("b-0", queue="b"))
    # One core left: DRF gives it to b (a already holds one), FIFO to a's older job.
    service.cycles()
    assert service.state(first) in RUNNING
    assert (service.state(late) in RUNNING) is b_runs


@pytest.mark.parametrize(("profile", "spread"), [("default", False), ("spread", True)])
def test_the_profile_decides_packing_or_spreading(
    service: FleetService, profile: str, spread: bool
) -> None:
    start(service, sim_cluster("c1", cpu=4, count=2), plugins={"profile": profile})
    ids = service.submit(job("one"), job("two"))
    service.cycles()
    nodes = {
        item["node"]
        for job_id in ids
        for item in service.store.get_job(job_id).run.assignment["placements"]  # type: ignore[union-attr]
    }
    assert len(nodes) == (2 if spread else 1)


def test_mode_and_cycle_interval_come_from_the_fleet(service: FleetService) -> None:
    start(service, mode="async", cycle_interval=0.2)
    loop = service.loop
    assert loop is not None
    assert loop.settings.mode is Mode.ASYNC and loop.runner is not None
    assert loop.settings.cycle_interval == 0.2
    [hello] = service.submit(job("hello"))
    service.cycle_until(lambda: service.state(hello) in RUNNING)


def test_a_silent_cluster_is_lost_after_the_fleets_heartbeat_timeout(
    service: FleetService,
) -> None:
    """``settings.heartbeat_timeout``: the service's own 30 s otherwise (``flotilla replay``
    sets it so a scenario's ``fail_at`` is replayed)."""
    start(service, sim_cluster("c1"), heartbeat_timeout=0.2)
    assert service.loop is not None and service.loop.settings.heartbeat_timeout == 0.2
    [hello] = service.submit(job("hello"))
    service.cycle_until(lambda: service.state(hello) in RUNNING)
    # The cluster's backend stops answering (as flotilla replay fails a scenario's cluster).
    service.apply(
        fleet_data(sim_cluster("c1", settings={"fail_at": time.time()}), heartbeat_timeout=0.2)
    )
    service.cycle_until(lambda: service.state(hello) is JobState.QUEUED)  # well before 30 s
    record = service.store.get_job(hello)
    assert record.reason == "cluster c1 became unreachable"
    assert {c.name: c.state for c in service.store.list_clusters()}["c1"] == "unreachable"


def test_priority_classes_of_the_fleet_give_a_submitted_job_its_priority(
    service: FleetService,
) -> None:

    start(
        service,
        sim_cluster("c1", cpu=2),
        priority_preemption=True,
        priority_classes=[
            {"name": "urgent", "value": 100, "preemptible": False},
            {"name": "batch", "value": 0},
        ],
    )
    api = service.api()

    def submit(name: str, klass: str) -> str:
        body = {
            "name": name,
            "queue": "default",
            "priority_class": klass,
            "tasks": [{"name": "main", "resources": {"cpu": 2}}],
            "payload": {"sim": {"duration": 1000}},
        }
        response = api.post("/v1/jobs", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["ids"][0])

    low = submit("low", "batch")
    service.cycles()
    high = submit("high", "urgent")
    service.cycles(5)
    assert service.store.get_job(high).priority == 100
    assert service.state(high) in RUNNING
    assert service.state(low) in (JobState.PREEMPTED, JobState.QUEUED)
    unknown = api.post(
        "/v1/jobs",
        json={
            "name": "x",
            "queue": "default",
            "priority_class": "gold",
            "tasks": [{"name": "main", "resources": {"cpu": 1}}],
        },
    )
    assert unknown.status_code == 422
    assert any(
        p.startswith("priority_class: unknown priority class 'gold' (the fleet has batch, urgent)")
        for p in unknown.json()["problems"]
    )
