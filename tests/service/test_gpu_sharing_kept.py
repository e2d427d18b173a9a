"""A cluster's ``gpu_sharing`` survives the service's refresh of its nodes: from the fleet
file when the backend reports its inventory, from the record at every later refresh, and
from a scenario into the fleet a replay runs."""

from __future__ import annotations

from datetime import UTC, datetime

from flotilla.model import ClusterSpec
from flotilla.model.cluster import GpuSharing
from flotilla.model.fleet import Fleet
from flotilla.model.node_info import NodeInfo
from flotilla.model.scenario import Scenario
from flotilla.replay.plan import fleet_document
from flotilla.service.cluster_watch import spec_from_record
from flotilla.service.fleet import FleetRuntime
from flotilla.store import ClusterRecord

NODE = NodeInfo("g", {"cpu": 8.0, "gpu": 1.0}, {}, (), gpu_count=1)


def test_the_fleet_files_gpu_sharing_reaches_the_stored_cluster() -> None:
    fleet = Fleet.model_validate(
        {
            "clusters": [
                {
                    "name": "gpus",
                    "backend": "sim",
                    "gpu_sharing": "none",
                    "nodes": [{"name": "g", "resources": {"cpu": 8, "gpu": 1}}],
                }
            ],
            "queues": [{"name": "default"}],
        }
    )
    runtime = FleetRuntime(store=None, backends={}, fleet=fleet)  # type: ignore[arg-type]
    assert runtime.cluster_spec("gpus", [NODE]).gpu_sharing is GpuSharing.NONE


def test_a_refresh_keeps_the_recorded_gpu_sharing() -> None:
    recorded = ClusterSpec.model_validate(
        {
            "name": "gpus",
            "backend": "local",
            "gpu_sharing": "exclusive",
            "nodes": [{"name": "g", "resources": {"cpu": 8, "gpu": 1}}],
        }
    )
    record = ClusterRecord(
        name="gpus",
        backend="local",
        labels={},
        spec=recorded.model_dump(mode="json"),
        state="ready",
        heartbeat_at=None,
        updated_at=datetime.now(UTC),
    )
    assert spec_from_record(record, [NODE]).gpu_sharing is GpuSharing.EXCLUSIVE


def test_a_replayed_scenario_keeps_its_clusters_gpu_sharing() -> None:
    scenario = Scenario.model_validate(
        {
            "name": "s",
            "clusters": [
                {
                    "name": "gpus",
                    "gpu_sharing": "none",
                    "nodes": [{"name": "g", "resources": {"cpu": 8, "gpu": 1}}],
                }
            ],
            "queues": [{"name": "q"}],
            "jobs": [],
        }
    )
    fleet = Fleet.model_validate(fleet_document(scenario, 1.0))
    assert fleet.clusters[0].gpu_sharing is GpuSharing.NONE
