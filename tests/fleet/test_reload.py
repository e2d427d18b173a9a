"""``flotilla fleet apply`` on a running service: the loop takes up the new fleet at its next
cycle — clusters added and removed, settings changed — without a restart."""

from __future__ import annotations

from pathlib import Path

from flotilla.store import JobState
from tests.fleet.support import FleetService, fleet_data, job, sim_cluster, sqlite_url


def test_an_applied_fleet_changes_clusters_and_settings_without_a_restart(
    tmp_path: Path,
) -> None:
    service = FleetService(sqlite_url(tmp_path))
    try:
        service.apply(fleet_data(sim_cluster("old", cpu=2)))
        loop = service.start()
        [first] = service.submit(job("first", 2))
        service.cycles()
        assert service.cluster_of(first) == "old"
        old_backend = service.runtime.backends["old"]

        api = service.api()
        new = fleet_data(
            sim_cluster("old", cpu=2),
            sim_cluster("cheap", cpu=8, cost={"cpu": 0.01}),
            assignment_strategy="cost-optimized",
        )
        assert api.put("/v1/fleet", json=new).status_code == 200
        service.cycles(2)
        assert set(service.runtime.backends) == {"old", "cheap"}
        assert service.runtime.backends["old"] is old_backend  # unchanged: kept, runs and all
        assert loop.settings.scheduling.assignment_strategy == "cost-optimized"
        assert service.store.get_cluster("cheap").state == "ready"
        [second] = service.submit(job("second", 1))
        service.cycles()
        assert service.cluster_of(second) == "cheap"

        clusters = {c["name"]: c for c in api.get("/v1/clusters").json()}
        assert clusters["old"]["allocated"] == {"cpu": 2.0}
        assert clusters["old"]["capacity"]["cpu"] == 2.0
        assert clusters["cheap"]["nodes"] == 1

        # Removing a cluster that still runs a job is refused; once it is idle, it goes.
        refused = api.put("/v1/fleet", json=fleet_data(sim_cluster("cheap", cpu=8)))
        assert refused.status_code == 409
        assert "cluster 'old' still has 1 active job(s)" in refused.json()["problems"][0]
        service.store.cancel(first, "make room")
        service.cycle_until(lambda: service.state(first) is JobState.CANCELLED)
        assert api.put("/v1/fleet", json=fleet_data(sim_cluster("cheap", cpu=8))).status_code == 200
        service.cycles(1)
        assert set(service.runtime.backends) == {"cheap"}
        assert [c.name for c in service.store.list_clusters()] == ["cheap"]
    finally:
        service.close()


def test_a_node_added_to_a_simulated_cluster_is_added(tmp_path: Path) -> None:
    """Issue 39: a node added under a simulated cluster's ``nodes:`` (the documented form)
    answered 200 and was never added: the backend was kept, built from the old nodes."""
    service = FleetService(sqlite_url(tmp_path))
    try:
        service.apply(fleet_data(sim_cluster("c", cpu=2)))
        service.start()
        [big] = service.submit(job("big", 4))
        service.cycles()
        assert service.state(big) is JobState.QUEUED
        grown = sim_cluster("c", cpu=2)
        grown["nodes"].append({"name": "c-large", "resources": {"cpu": 4}})
        assert service.api().put("/v1/fleet", json=fleet_data(grown)).status_code == 200
        service.cycle_until(lambda: service.state(big) in (JobState.PENDING, JobState.RUNNING))
        clusters = {c["name"]: c for c in service.api().get("/v1/clusters").json()}
        assert clusters["c"]["nodes"] == 2
    finally:
        service.close()
