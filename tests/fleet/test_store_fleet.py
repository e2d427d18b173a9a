"""The store's side of a fleet apply: one transaction, and what it keeps of a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from flotilla.model import ClusterSpec
from flotilla.model.fleet_loader import fleet_from_data
from flotilla.service.fleet import OWNER_LABEL, fleet_change
from flotilla.store import ConflictError, SqlStore
from tests.fleet.support import fleet_data, sim_cluster


def test_an_apply_keeps_an_existing_clusters_nodes_state_and_owner(tmp_path: Path) -> None:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        store.upsert_cluster(
            ClusterSpec.model_validate(
                {
                    "name": "local",
                    "backend": "local",
                    "labels": {OWNER_LABEL: "host:/state", "team": "old"},
                    "nodes": [{"name": "vm", "resources": {"cpu": 2}}],
                }
            )
        )
        fleet = fleet_from_data(
            fleet_data({"name": "local", "backend": "local", "labels": {"team": "new"}})
        )
        assert store.apply_fleet(fleet_change(fleet)).version == 1
        [record] = store.list_clusters()
        assert record.labels == {OWNER_LABEL: "host:/state", "team": "new"}
        assert record.state == "ready"
        assert [node.name for node in store.list_nodes("local")] == ["vm"]
    finally:
        store.close()


def test_a_refused_apply_writes_nothing(tmp_path: Path) -> None:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        first = fleet_from_data(fleet_data(sim_cluster("a")))
        store.apply_fleet(fleet_change(first))
        second = fleet_from_data(fleet_data(sim_cluster("b"), queues=[{"name": "other"}]))
        with pytest.raises(ConflictError) as caught:
            store.apply_fleet(fleet_change(second, expected_version=0))
        assert caught.value.problems == [
            "(top level): the fleet changed meanwhile (version 1, expected 0); read it again "
            "and re-apply"
        ]
        assert [c.name for c in store.list_clusters()] == ["a"]
        assert [q.name for q in store.list_queues()] == ["default"]
        assert store.fleet_version() == 1
    finally:
        store.close()
