"""Cluster and node capacity/allocation gauges: per resource, from the store's clusters and
the active runs' placements; series of what went away removed; node series bounded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from flotilla.jobdb import JobDb
from flotilla.model import ClusterSpec, JobSpec, QueueSpec
from flotilla.service import capacity
from flotilla.service.capacity import CapacityGauges
from flotilla.service.metrics import SchedulerMetrics
from flotilla.store import SqlStore


def cluster(name: str, nodes: int, cpu: float, gpu: int = 0) -> ClusterSpec:
    group = {"name": f"{name}-n", "count": nodes, "resources": {"cpu": cpu, "memory": "8Gi"}}
    if gpu:
        group["gpus"] = {"count": gpu}
    return ClusterSpec.model_validate({"name": name, "nodes": [group]})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    store = SqlStore.open(f"sqlite:///{tmp_path}/flotilla.db")
    store.put_queue(QueueSpec(name="team-a"))
    store.upsert_cluster(cluster("east", nodes=2, cpu=4, gpu=2))
    store.upsert_cluster(cluster("west", nodes=1, cpu=8))
    spec = {"name": "train", "queue": "team-a"}
    spec["tasks"] = [{"name": "main", "replicas": 2, "resources": {"cpu": 1, "gpu": 1}}]
    (job_id,) = store.submit_jobs([JobSpec.model_validate(spec)])
    placements = [{"task": "main", "replica": i, "node": "east-n-0"} for i in range(2)]
    store.record_run(job_id, "east", {"placements": placements})
    yield store
    store.close()


def published(store: SqlStore, gauges: CapacityGauges, metrics: SchedulerMetrics) -> str:
    gauges.publish(store, JobDb.load(store).read_txn())
    return generate_latest(metrics.registry).decode()


def test_capacity_and_allocation_per_cluster_node_and_resource(store: SqlStore) -> None:
    metrics = SchedulerMetrics()
    text = published(store, CapacityGauges(metrics), metrics)
    assert 'flotilla_cluster_capacity{cluster="east",resource="cpu"} 8.0' in text
    assert 'flotilla_cluster_capacity{cluster="east",resource="gpu"} 4.0' in text
    assert 'flotilla_cluster_allocated{cluster="east",resource="gpu"} 2.0' in text
    assert 'flotilla_cluster_allocated{cluster="west",resource="cpu"} 0.0' in text
    assert 'flotilla_node_allocated{cluster="east",node="east-n-0",resource="cpu"} 2.0' in text
    assert 'flotilla_node_allocated{cluster="east",node="east-n-1",resource="cpu"} 0.0' in text
    assert 'flotilla_node_capacity{cluster="west",node="west-n-0",resource="cpu"} 8.0' in text


def test_series_of_a_removed_cluster_go_and_node_series_are_bounded(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics = SchedulerMetrics()
    gauges = CapacityGauges(metrics)
    published(store, gauges, metrics)
    store.delete_cluster("west")
    text = published(store, gauges, metrics)
    assert 'cluster="west"' not in text and 'cluster="east"' in text
    monkeypatch.setattr(capacity, "NODE_SERIES_LIMIT", 1)
    text = published(store, gauges, metrics)
    assert "flotilla_node_capacity{" not in text
    assert 'flotilla_cluster_capacity{cluster="east",resource="cpu"} 8.0' in text
