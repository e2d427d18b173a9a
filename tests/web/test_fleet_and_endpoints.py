"""What the dashboard's own endpoints answer: allocation per node, queue and quota; the
timeline; who the caller is; the same tokens as the API; and newest-first job pages."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from flotilla.model import ClusterSpec, JobSpec, QueueSpec, QuotaSpec
from flotilla.server import AuthSettings, create_app
from flotilla.store import FleetRecord, JobState, RunRequest, SqlStore, Transition
from flotilla.web import mount_dashboard
from flotilla.web.recent import recent_activity
from flotilla.web.timeline import Timeline
from flotilla.web.usage import fleet_usage
from tests.server.api_support import FakeScheduler
from tests.timing import wait_until

TOKENS = {
    "users": [
        {"name": "ana", "token_env": "ANA", "queues": {"team-a": ["cancel"]}},
        {"name": "ops", "token_env": "OPS", "admin": True},
        {"name": "bo", "token_env": "BO", "queues": {"team-b": ["submit"]}},
    ]
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    """Two 8-cpu nodes with 4 GPUs each; team-a (quota qa: min 4 cpu) runs a 2-replica job
    holding 3 cpu and 1 GPU per replica; team-b (quota qb: min 8 cpu, weight 2) waits."""
    store = SqlStore.open(f"sqlite:///{tmp_path}/flotilla.db")
    group = {"name": "g", "count": 2, "resources": {"cpu": 8, "memory": "32Gi"}}
    group["gpus"] = {"count": 4, "memory": "80Gi"}
    store.upsert_cluster(ClusterSpec.model_validate({"name": "c1", "nodes": [group]}))
    store.put_quota(
        QuotaSpec.model_validate(
            {
                "name": "root",
                "children": [
                    {"name": "qa", "min": {"cpu": 4}, "max": {"cpu": 12}},
                    {"name": "qb", "min": {"cpu": 8}},
                ],
            }
        )
    )
    store.put_queue(QueueSpec(name="team-a", quota="qa"))
    store.put_queue(QueueSpec(name="team-b", quota="qb", weight=2))
    task = {"name": "main", "replicas": 2, "resources": {"cpu": 3, "gpu": 1}}
    running, _waiting = store.submit_jobs(
        [
            JobSpec.model_validate({"name": "train", "queue": "team-a", "tasks": [task]}),
            JobSpec.model_validate({"name": "eval", "queue": "team-b", "tasks": [task]}),
        ]
    )
    placements = [  # as the scheduler stores them: a whole device is in gpus and in shares
        {"task": "main", "replica": 0, "node": "g-0", "gpus": [0], "shares": [[0, 1.0]]},
        {"task": "main", "replica": 1, "node": "g-1", "gpus": [2], "shares": [[2, 1.0]]},
    ]
    store.record_runs([RunRequest(running, "c1", {"cluster": "c1", "placements": placements})])
    yield store
    store.close()


def test_allocation_per_node_cluster_queue_and_quota(store: SqlStore) -> None:
    usage = fleet_usage(store).as_dict()
    [cluster] = usage["clusters"]
    assert cluster["capacity"] == {"cpu": 16, "memory": 64 * 2**30, "gpu": 8}
    assert cluster["allocated"] == {"cpu": 6, "gpu": 2}
    first = cluster["nodes"][0]
    assert (first["name"], first["allocated"], first["gpu_devices"]) == (
        "g-0",
        {"cpu": 3, "gpu": 1},
        4,
    )
    assert first["gpus_in_use"] == {"0": ["train"]}
    queues = {queue["name"]: queue for queue in usage["queues"]}
    assert (queues["team-a"]["running"], queues["team-a"]["queued"]) == (1, 0)
    assert (queues["team-b"]["running"], queues["team-b"]["queued"]) == (0, 1)
    assert queues["team-a"]["dominant_share"] == 0.375  # 6 of 16 cpu beats 2 of 8 GPUs
    # Both want resources: fair shares follow the weights 1 and 2.
    assert queues["team-a"]["fair_share"] == pytest.approx(1 / 3, abs=1e-4)
    assert queues["team-b"]["fair_share"] == pytest.approx(2 / 3, abs=1e-4)
    quotas = {quota["name"]: quota for quota in usage["quotas"]}
    assert quotas["qa"]["borrowing"] == {"cpu": 2}  # uses 6, guaranteed 4
    assert quotas["qb"]["lending"] == {"cpu": 8}  # guaranteed 8, uses none
    assert quotas["root"]["usage"] == {"cpu": 6, "gpu": 2}


@pytest.fixture
def client(store: SqlStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    auth = AuthSettings.from_data(
        TOKENS, environ={"ANA": "ana-token", "OPS": "ops-token", "BO": "bo-token"}
    )
    app = mount_dashboard(create_app(store, FakeScheduler(), auth), timeline_interval=0.05)
    with TestClient(app) as client:  # runs the lifespan: the timeline samples
        yield client


def test_the_page_needs_no_token_but_its_data_does(client: TestClient) -> None:
    page = client.get("/ui")
    assert page.status_code == 200
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for path in ("/ui/api/fleet", "/ui/api/timeline", "/ui/api/me"):
        assert client.get(path).status_code == 401, path
        bad = client.get(path, headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401, path


def test_who_am_i_names_the_permissions(client: TestClient) -> None:
    me = client.get("/ui/api/me", headers={"Authorization": "Bearer ana-token"}).json()
    assert me == {
        "name": "ana",
        "admin": False,
        "queues": {"team-a": ["cancel"]},
        "auth_enabled": True,
        "auth_mode": "tokens",
        "identified": True,
    }


def test_the_fleet_view_hides_the_names_of_jobs_the_caller_may_not_read(
    client: TestClient,
) -> None:
    """Issue 23: ``/ui/api/fleet`` named the jobs on every node, whoever asked."""

    def names_on_nodes(token: str) -> set[str]:
        response = client.get("/ui/api/fleet", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200
        nodes = [node for cluster in response.json()["clusters"] for node in cluster["nodes"]]
        gpus = [name for node in nodes for names in node["gpus_in_use"].values() for name in names]
        return {name for node in nodes for name in node["jobs"]} | set(gpus)

    assert names_on_nodes("ana-token") == {"train"}  # cancel on team-a includes read
    assert names_on_nodes("bo-token") == {"(hidden)"}
    assert names_on_nodes("ops-token") == {"train"}


def test_the_timeline_samples_the_fleet_while_served(client: TestClient) -> None:
    headers = {"Authorization": "Bearer ops-token"}
    samples: list[dict[str, object]] = []

    def two_samples() -> bool:
        nonlocal samples
        samples = client.get("/ui/api/timeline", headers=headers).json()["samples"]
        return len(samples) >= 2

    wait_until(two_samples, "two samples of the timeline", 30, 0.05)
    latest = samples[-1]
    assert latest["clusters"] == {"c1": {"cpu": 0.375, "memory": 0.0, "gpu": 0.25}}
    assert latest["queues"]["team-b"]["queued"] == 1  # type: ignore[index]
    later = client.get(
        "/ui/api/timeline", headers=headers, params={"since": samples[-1]["time"]}
    ).json()["samples"]
    assert all(sample["time"] > samples[-1]["time"] for sample in later)  # type: ignore[operator]


def test_jobs_newest_first_and_by_part_of_the_name(client: TestClient, store: SqlStore) -> None:
    headers = {"Authorization": "Bearer ops-token"}
    specs = [
        JobSpec.model_validate(
            {"name": f"sweep-{i}", "queue": "team-a", "tasks": [{"name": "m", "resources": {}}]}
        )
        for i in range(5)
    ]
    store.submit_jobs(specs)
    first = client.get(
        "/v1/jobs", headers=headers, params={"order": "newest", "name": "SWEEP", "limit": 3}
    ).json()
    assert [job["name"] for job in first["jobs"]] == ["sweep-4", "sweep-3", "sweep-2"]
    rest = client.get(
        "/v1/jobs",
        headers=headers,
        params={"order": "newest", "name": "sweep", "after": first["next_cursor"]},
    ).json()
    assert [job["name"] for job in rest["jobs"]] == ["sweep-1", "sweep-0"]
    assert rest["next_cursor"] is None
    literal = client.get("/v1/jobs", headers=headers, params={"name": "%"}).json()
    assert literal["jobs"] == []  # the search is a plain substring, not a LIKE pattern


def test_recent_waits_per_queue_and_runs_on_nodes(store: SqlStore) -> None:
    recent = recent_activity(store)
    assert len(recent["waits"]["team-a"]) == 1 and recent["waits"]["team-a"][0] >= 0
    assert recent["waits"]["team-b"] == []  # still waiting: no wait measured yet
    assert recent["gantt"]["bars"] == []  # leased, not started: nothing ran on a node yet


def test_recent_hides_the_names_of_jobs_the_caller_may_not_read(store: SqlStore) -> None:
    (job,) = [record for record in store.list_jobs().jobs if record.name == "train"]
    assert job.run is not None
    store.transition(job.id, JobState.PENDING, "dispatched", run=job.run.id)
    store.transition(job.id, JobState.RUNNING, "started", run=job.run.id)
    everyone = recent_activity(store)
    assert {bar["label"] for bar in everyone["gantt"]["bars"]} == {"train"}
    stranger = recent_activity(store, may_read=lambda queue, owner: queue != "team-a")
    bars = stranger["gantt"]["bars"]
    assert len(bars) == 2 and {bar["label"] for bar in bars} == {"(hidden)"}


def test_the_timeline_samples_less_often_when_a_sample_takes_long(store: SqlStore) -> None:
    # A fleet with thousands of running jobs: a sample is most of a second of Python, and
    # every two seconds it took a third of a core from the API and the scheduler.
    timeline = Timeline(store, None, interval=2.0)
    assert timeline.wait_after(0.01) == 2.0
    assert timeline.wait_after(0.7) == pytest.approx(7.0)


def test_with_the_local_token_the_page_says_who_is_signed_in(store: SqlStore) -> None:
    """The header said "no authentication (loopback)" while the local token was required."""
    app = create_app(store, FakeScheduler(), AuthSettings.local("local-secret", name="alice"))
    mount_dashboard(app)
    client = TestClient(app)
    assert client.get("/ui/api/me").status_code == 401
    me = client.get("/ui/api/me", headers={"Authorization": "Bearer local-secret"}).json()
    assert (me["name"], me["admin"], me["auth_enabled"]) == ("alice", True, True)
    assert (me["auth_mode"], me["identified"]) == ("local-token", True)


@pytest.mark.parametrize(
    ("auth", "headers", "mode", "identified"),
    [
        # The local token of an account with no name: a token is still required, but
        # there is no name to show.
        (
            AuthSettings.local("local-secret"),
            {"Authorization": "Bearer local-secret"},
            "local-token",
            False,
        ),
        (AuthSettings.disabled(), {}, "off", False),
    ],
)
def test_the_page_is_told_whether_a_token_is_required_and_whether_the_caller_has_a_name(
    store: SqlStore, auth: AuthSettings, headers: dict[str, str], mode: str, identified: bool
) -> None:
    app = mount_dashboard(create_app(store, FakeScheduler(), auth))
    me = TestClient(app).get("/ui/api/me", headers=headers).json()
    assert (me["auth_mode"], me["auth_enabled"], me["identified"]) == (
        mode,
        mode != "off",
        identified,
    )


def test_with_a_half_life_the_queue_page_shows_decayed_usage_and_the_share_drf_orders_by(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 item 1: train (2 × 3 cpu, 1 GPU) has run for one half-life; its queue's
    decayed usage is what it held on average over the decay window, and the share DRF orders
    team-a by is what it holds now plus that."""
    [train] = [job for job in store.list_jobs().jobs if job.name == "train"]
    assert train.run is not None
    half_life = 3600.0
    started = datetime.now(UTC) - timedelta(seconds=half_life)
    store.transition_many(
        [Transition(train.id, JobState.RUNNING, "started", run=train.run.id, started_at=started)]
    )
    assert fleet_usage(store).as_dict()["queues"][0]["decayed_usage"] is None  # no half-life
    document = {"settings": {"usage_half_life": half_life}}
    monkeypatch.setattr(
        store, "get_fleet", lambda: FleetRecord(version=1, document=document, applied_at=started)
    )
    queues = {queue["name"]: queue for queue in fleet_usage(store).as_dict()["queues"]}
    # Held A for one half-life h: U = A·τ·(1 − 2^-1) = A·τ/2, read as U/τ = A/2.
    assert queues["team-a"]["decayed_usage"]["cpu"] == pytest.approx(3.0, rel=1e-3)
    assert queues["team-a"]["decayed_usage"]["gpu"] == pytest.approx(1.0, rel=1e-3)
    assert queues["team-a"]["decayed_share"] == pytest.approx(9 / 16, rel=1e-3)
    assert queues["team-b"]["decayed_usage"] == {}
    assert queues["team-b"]["decayed_share"] == 0.0
