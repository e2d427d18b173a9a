"""The store contract for queues, quotas, clusters and nodes."""

from __future__ import annotations

import pytest
from store_support import FakeClock, job

from flotilla.model import ClusterSpec, NodeGroup, QueueSpec, QuotaSpec
from flotilla.store import ConflictError, JobState, NotFoundError, SqlStore


def test_queues_are_created_replaced_listed_and_deleted(store: SqlStore) -> None:
    store.put_queue(QueueSpec(name="team-c", quota="research", weight=3))
    assert store.get_queue("team-c") == QueueSpec(name="team-c", quota="research", weight=3)
    store.put_queue(QueueSpec(name="team-c", weight=0.5))
    assert store.get_queue("team-c").weight == 0.5
    assert [queue.name for queue in store.list_queues()] == ["team-a", "team-b", "team-c"]
    store.delete_queue("team-c")
    with pytest.raises(NotFoundError):
        store.get_queue("team-c")


def test_a_queue_with_unfinished_jobs_cannot_be_deleted(store: SqlStore) -> None:
    store.submit_jobs([job("j")])
    with pytest.raises(ConflictError, match="1 unfinished job"):
        store.delete_queue("team-a")
    assert store.get_queue("team-a").name == "team-a"


def test_a_queue_whose_jobs_all_ended_is_deleted_and_its_jobs_keep_its_name(
    store: SqlStore,
) -> None:
    """A queue that had ever held a job could never be deleted (a foreign key)."""
    done, dropped = store.submit_jobs([job("done"), job("dropped")])
    store.record_run(done, "c1", {"placements": []})
    store.transition(done, JobState.RUNNING, "started")
    store.transition(done, JobState.SUCCEEDED, "exited 0")
    store.cancel(dropped, "not needed")
    store.delete_queue("team-a")
    assert "team-a" not in [queue.name for queue in store.list_queues()]
    assert store.get_job(done).queue == "team-a" and store.get_job(done).state is JobState.SUCCEEDED
    assert len(store.events(done)) >= 4  # the history stays
    store.put_queue(QueueSpec(name="team-a"))  # created again: its old jobs are in it
    assert {record.id for record in store.list_jobs().jobs} == {done, dropped}


def test_quota_trees_round_trip_and_replace_whole_subtrees(store: SqlStore) -> None:
    tree = QuotaSpec(
        name="org",
        min={"gpu": 8},
        children=[
            QuotaSpec(name="research", min={"gpu": 6}, max={"gpu": 8}),
            QuotaSpec(name="prod", min={"gpu": 2}, children=[QuotaSpec(name="serving")]),
        ],
    )
    store.put_quota(tree)
    assert store.get_quota("org") == tree
    assert store.get_quota("prod") == tree.children[1]
    smaller = QuotaSpec(name="org", min={"gpu": 4}, children=[QuotaSpec(name="research")])
    store.put_quota(smaller)
    assert store.list_quotas() == [smaller]
    with pytest.raises(NotFoundError):
        store.get_quota("serving")
    store.put_quota(QuotaSpec(name="batch"), parent="org")
    assert [child.name for child in store.get_quota("org").children] == ["research", "batch"]
    store.delete_quota("org")
    assert store.list_quotas() == []


def test_clusters_expand_node_groups_and_keep_heartbeats(store: SqlStore, clock: FakeClock) -> None:
    spec = ClusterSpec(
        name="c1",
        labels={"region": "eu"},
        nodes=[NodeGroup(name="gpu", count=3, resources={"cpu": 32, "gpu": 8})],
    )
    record = store.upsert_cluster(spec)
    assert (record.state, record.heartbeat_at, record.labels) == ("ready", None, {"region": "eu"})
    assert [node.name for node in store.list_nodes("c1")] == ["gpu-0", "gpu-1", "gpu-2"]
    clock.advance(5)
    beat = store.heartbeat("c1", ["gpu-1"])
    assert beat.heartbeat_at == clock.now
    beats = {node.name: node.heartbeat_at for node in store.list_nodes("c1")}
    assert beats == {"gpu-0": None, "gpu-1": clock.now, "gpu-2": None}
    smaller = spec.model_copy(update={"nodes": [spec.nodes[0].model_copy(update={"count": 2})]})
    store.upsert_cluster(smaller)
    assert [node.heartbeat_at for node in store.list_nodes("c1")] == [None, clock.now]
    store.upsert_node("c1", NodeGroup(name="cpu", resources={"cpu": 4}), state="cordoned")
    assert {node.name: node.state for node in store.list_nodes("c1")}["cpu"] == "cordoned"
    assert store.set_cluster_state("c1", "unreachable").state == "unreachable"
    assert store.get_cluster("c1").reason is None
    assert [cluster.name for cluster in store.list_clusters()] == ["c1"]
    store.delete_cluster("c1")
    assert store.list_clusters() == []
    with pytest.raises(NotFoundError):
        store.list_nodes("c1")


def test_a_heartbeat_rewrites_a_node_row_at_most_once_a_minute(
    store: SqlStore, clock: FakeClock
) -> None:
    """Every cycle's heartbeat rewrote every node row (5,000 nodes: 1.5M updates and a 247 MB
    table of dead rows on PostgreSQL, issue 40): the cluster's heartbeat moves every time, a
    node's at most once a minute (it is only shown; the cluster's decides its health)."""
    store.upsert_cluster(
        ClusterSpec(name="c1", nodes=[NodeGroup(name="n", count=2, resources={"cpu": 4})])
    )
    clock.advance(1)
    first = clock.now
    store.heartbeat("c1")
    clock.advance(30)
    assert store.heartbeat("c1").heartbeat_at == clock.now
    assert [node.heartbeat_at for node in store.list_nodes("c1")] == [first, first]
    clock.advance(31)
    store.heartbeat("c1")
    assert [node.heartbeat_at for node in store.list_nodes("c1")] == [clock.now, clock.now]


def test_an_unreachable_clusters_reason_is_kept_until_it_is_ready_again(store: SqlStore) -> None:
    """The reason lives in the database (issue 23): every process over it shows the same."""
    spec = ClusterSpec(name="c1", nodes=[NodeGroup(name="n", resources={})])
    store.upsert_cluster(spec)
    record = store.set_cluster_state("c1", "unreachable", reason="settings.x: not set")
    assert (record.state, record.reason) == ("unreachable", "settings.x: not set")
    assert store.get_cluster("c1").reason == "settings.x: not set"
    assert [cluster.reason for cluster in store.list_clusters()] == ["settings.x: not set"]
    long = store.set_cluster_state("c1", "unreachable", reason="y" * 10_000).reason
    assert long is not None and len(long) == 2000 and long.endswith("…")
    assert store.set_cluster_state("c1", "ready").reason is None
    store.set_cluster_state("c1", "unreachable", reason="again")
    assert store.upsert_cluster(spec).reason is None  # it answered
