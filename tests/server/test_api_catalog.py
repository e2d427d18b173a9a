"""Queues, quotas, clusters and nodes through the API."""

from __future__ import annotations

from fastapi.testclient import TestClient

from flotilla.model import ClusterSpec
from flotilla.store import SqlStore
from tests.server.api_support import spec


def test_queue_crud(client: TestClient) -> None:
    created = client.put("/v1/queues/team-c", json={"weight": 3})
    assert created.status_code == 200 and created.json()["name"] == "team-c"
    assert client.get("/v1/queues/team-c").json()["weight"] == 3
    names = [queue["name"] for queue in client.get("/v1/queues").json()]
    assert names == ["team-a", "team-b", "team-c"]
    assert client.delete("/v1/queues/team-c").status_code == 204
    gone = client.get("/v1/queues/team-c")
    assert gone.status_code == 404 and "team-c" in gone.json()["message"]


def test_queue_input_is_checked(client: TestClient) -> None:
    bad = client.put("/v1/queues/q", json={"weight": 0, "colour": "red"})
    assert bad.status_code == 422
    assert sorted(bad.json()["problems"]) == [
        "colour: unknown field",
        "weight: Input should be greater than 0",
    ]
    mismatch = client.put("/v1/queues/q", json={"name": "other"})
    assert mismatch.status_code == 400
    assert mismatch.json()["problems"] == ["name: 'other' does not match the URL's 'q'"]
    no_quota = client.put("/v1/queues/q", json={"quota": "missing"})
    assert no_quota.status_code == 400
    assert no_quota.json()["problems"] == ["quota: no such quota 'missing'"]
    assert client.get("/v1/queues/q").status_code == 404


def test_a_queue_with_unfinished_jobs_cannot_be_deleted(client: TestClient) -> None:
    assert client.post("/v1/jobs", json=spec("a")).status_code == 201
    response = client.delete("/v1/queues/team-a")
    assert response.status_code == 409
    assert "has 1 unfinished job(s)" in response.json()["message"]


def test_quota_crud_with_subtree_and_parent(client: TestClient) -> None:
    tree = {"min": {"gpu": 8}, "children": [{"name": "vision", "min": {"gpu": 2}}]}
    assert client.put("/v1/quotas/org", json=tree).status_code == 200
    child = client.put("/v1/quotas/nlp", params={"parent": "org"}, json={"max": {"gpu": "4"}})
    assert child.status_code == 200 and child.json()["max"] == {"gpu": 4.0}
    roots = client.get("/v1/quotas").json()
    assert [root["name"] for root in roots] == ["org"]
    assert [c["name"] for c in roots[0]["children"]] == ["vision", "nlp"]
    orphan = client.put("/v1/quotas/x", params={"parent": "nope"}, json={})
    assert orphan.status_code == 400 and orphan.json()["problems"] == [
        "parent: no such quota 'nope'"
    ]
    assert client.delete("/v1/quotas/org").status_code == 204
    assert client.get("/v1/quotas/vision").status_code == 404
    bad = client.put("/v1/quotas/q", json={"min": {"cpu": "lots"}})
    assert bad.status_code == 422 and bad.json()["problems"][0].startswith("min.cpu: ")


def test_clusters_and_nodes(client: TestClient, store: SqlStore) -> None:
    store.upsert_cluster(
        ClusterSpec.model_validate(
            {
                "name": "gpu-east",
                "labels": {"region": "east"},
                "nodes": [{"name": "g", "count": 2, "resources": {"cpu": 32, "gpu": 4}}],
            }
        )
    )
    clusters = client.get("/v1/clusters").json()
    assert [(c["name"], c["state"], c["labels"]) for c in clusters] == [
        ("gpu-east", "ready", {"region": "east"})
    ]
    nodes = client.get("/v1/clusters/gpu-east/nodes").json()
    assert [node["name"] for node in nodes] == ["g-0", "g-1"]
    assert nodes[0]["resources"]["gpu"] == 4
    assert client.get("/v1/clusters/nope/nodes").status_code == 404
