"""A cluster's ``topology`` survives the service's refresh of its nodes: a cluster
registered without a fleet file keeps the levels it was recorded with (issue 28)."""

from __future__ import annotations

from datetime import UTC, datetime

from flotilla.model import ClusterSpec
from flotilla.model.node_info import NodeInfo
from flotilla.service.cluster_watch import spec_from_record
from flotilla.store import ClusterRecord

NODE = NodeInfo("n1", {"cpu": 8.0}, {"rack": "r1", "block": "b1"}, (), gpu_count=0)


def test_a_refresh_keeps_the_recorded_topology() -> None:
    recorded = ClusterSpec.model_validate(
        {
            "name": "racks",
            "backend": "local",
            "topology": ["block", "rack"],
            "nodes": [{"name": "n1", "resources": {"cpu": 8}}],
        }
    )
    record = ClusterRecord(
        name="racks",
        backend="local",
        labels={},
        spec=recorded.model_dump(mode="json"),
        state="ready",
        heartbeat_at=None,
        updated_at=datetime.now(UTC),
    )
    assert spec_from_record(record, [NODE]).topology == ["block", "rack"]
