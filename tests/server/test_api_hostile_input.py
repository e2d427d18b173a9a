"""Hostile but well-formed requests (issue 12, defects 9-14): every one a 4xx naming the
field, never a 500 and never stored garbage, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from flotilla.server import AuthSettings, create_app
from flotilla.server.context import ServerContext
from flotilla.server.errors import ApiError
from flotilla.server.guard import LOOPBACK_HOSTS, ServerLimits
from flotilla.store import SqlStore
from tests.server.api_support import spec


def problems(response: Any) -> list[str]:
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    found: list[str] = response.json()["problems"]
    return found


def raw(client: TestClient, text: str, path: str = "/v1/jobs") -> Any:
    return client.post(path, content=text, headers={"content-type": "application/json"})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("payload", {"command": ["echo", "a\u0000b"]}),
        ("payload", {"command": "echo", "env": {"A": "x\u0000"}}),
        ("labels", {"team": "a\u0000"}),
        ("user", "bo\u0000b"),
    ],
)
def test_nul_characters_in_a_job_are_refused_naming_the_field(
    lifecycle_client: TestClient, any_store: SqlStore, field: str, value: object
) -> None:
    response = lifecycle_client.post("/v1/jobs", json=spec("nul", **{field: value}))
    assert response.status_code == 400
    [line] = problems(response)
    assert line.startswith(field) and "NUL" in line
    assert any_store.list_jobs().jobs == []


def test_a_nul_deep_in_a_large_batch_is_refused_naming_the_field(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    # A large body is checked on a worker thread, and a NUL is looked for only where the
    # JSON escapes one: neither lets one through.
    jobs = [spec(f"big-{index}") for index in range(200)]
    jobs[150] = spec("nul", labels={"team": "a\u0000"})
    body = json.dumps({"jobs": jobs})
    assert len(body) > 16 * 1024 and "\\u0000" in body
    response = raw(lifecycle_client, body)
    assert response.status_code == 400
    assert problems(response) == ["jobs[150].labels.team: NUL characters are not allowed"]
    assert any_store.list_jobs().jobs == []


@pytest.mark.parametrize(
    "path",
    [
        "/v1/jobs?owner=a%00b",
        "/v1/jobs?queue=a%00",
        "/v1/jobs?label=a%3Db%00",
        "/v1/jobs/a%00b",
        "/v1/jobs/x/events",
    ],
)
def test_nul_characters_in_a_query_or_path_are_a_400(
    lifecycle_client: TestClient, path: str
) -> None:
    response = lifecycle_client.get(path)
    assert response.status_code in (400, 404), response.text
    if "%00" in path:
        assert response.status_code == 400 and "NUL" in response.json()["message"]


def test_a_nul_label_cannot_break_later_label_filters(
    lifecycle_client: TestClient,
) -> None:
    lifecycle_client.post("/v1/jobs", json=spec("nul", labels={"k": "v\u0000"}))
    lifecycle_client.post("/v1/jobs", json=spec("fine", labels={"k": "v"}))
    listed = lifecycle_client.get("/v1/jobs", params={"label": "k=v"})
    assert listed.status_code == 200 and len(listed.json()["jobs"]) == 1
    cancelled = lifecycle_client.post("/v1/jobs/cancel", json={"labels": {"k": "v"}})
    assert cancelled.status_code == 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (spec("big", count=10**30), "count"),
        (spec("big", priority=2**63), "priority"),
        (spec("big", tasks=[{"name": "m", "replicas": 10**12, "resources": {"cpu": 1}}]), "tasks"),
    ],
)
def test_huge_numbers_are_refused_naming_the_field(
    lifecycle_client: TestClient, any_store: SqlStore, body: dict[str, Any], field: str
) -> None:
    response = lifecycle_client.post("/v1/jobs", json=body)
    assert response.status_code == 422, response.text
    assert any(line.startswith(field) for line in problems(response))
    assert any_store.list_jobs().jobs == []


@pytest.mark.parametrize(
    "path",
    [f"/v1/jobs?after={2**63}", f"/v1/jobs?after={10**30}", '/v1/jobs?label=a"b=1'],
)
def test_out_of_range_cursors_and_bad_label_filters_are_422(
    lifecycle_client: TestClient, path: str
) -> None:
    response = lifecycle_client.get(path)
    assert response.status_code == 422, response.text
    assert problems(response)[0].split(":")[0] in ("after", "label", "label[0]")


def test_a_huge_log_offset_and_priority_are_4xx(lifecycle_client: TestClient) -> None:
    (job,) = lifecycle_client.post("/v1/jobs", json=spec("a")).json()["ids"]
    assert lifecycle_client.get(f"/v1/jobs/{job}/logs?offset={10**18 * 10}").status_code == 422
    assert lifecycle_client.get(f"/v1/jobs/{job}/logs?replica={10**30}").status_code == 422
    assert (
        lifecycle_client.post(f"/v1/jobs/{job}/priority", json={"priority": 2**63}).status_code
        == 422
    )


@pytest.mark.parametrize("constant", ["Infinity", "-Infinity", "NaN"])
@pytest.mark.parametrize("field", ["max_runtime", "duration"])
def test_infinity_and_nan_are_not_json_and_are_refused(
    lifecycle_client: TestClient, any_store: SqlStore, constant: str, field: str
) -> None:
    text = json.dumps(spec("inf")).removesuffix("}") + f', "{field}": {constant}}}'
    response = raw(lifecycle_client, text)
    assert response.status_code == 400
    assert constant.lstrip("-") in problems(response)[0]
    gang = json.dumps(spec("g")).removesuffix("}") + f', "gang": {{"timeout": {constant}}}}}'
    assert raw(lifecycle_client, gang).status_code == 400
    assert any_store.list_jobs().jobs == []


def test_a_key_given_twice_is_refused_naming_it(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    """Issue 35: the JSON API kept the last of two values where the CLI refuses the file;
    which one counts is not the client's guess to make."""
    text = json.dumps(spec("twice")).removesuffix("}") + ', "queue": "other"}'
    response = raw(lifecycle_client, text)
    assert response.status_code == 400
    assert problems(response) == ["queue: given more than once"]
    nested = json.dumps(spec("inner"))
    nested = nested.replace('"command": [', '"command": ["false"], "command": [', 1)
    response = raw(lifecycle_client, nested)
    assert response.status_code == 400
    assert problems(response)[0].endswith(".command: given more than once")
    assert any_store.list_jobs().jobs == []


def test_infinity_in_a_queue_weight_is_refused(lifecycle_client: TestClient) -> None:
    response = lifecycle_client.put(
        "/v1/queues/q", content='{"weight": Infinity}', headers={"content-type": "application/json"}
    )
    assert response.status_code == 400


def test_json_nested_thousands_deep_is_a_400(lifecycle_client: TestClient) -> None:
    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    response = raw(lifecycle_client, deep)
    assert response.status_code == 400 and "nested" in problems(response)[0]
    listy = "[" * 100_000 + "]" * 100_000
    assert raw(lifecycle_client, listy).status_code == 400


def test_a_quota_cannot_be_its_own_ancestor_or_hold_a_name_twice(
    lifecycle_client: TestClient,
) -> None:
    tree = {"children": [{"name": "child", "children": [{"name": "leaf"}]}]}
    assert lifecycle_client.put("/v1/quotas/root", json=tree).status_code == 200
    cycle = lifecycle_client.put("/v1/quotas/root?parent=leaf", json=tree)
    assert cycle.status_code == 422 and problems(cycle)[0].startswith("parent:")
    itself = lifecycle_client.put("/v1/quotas/other?parent=other", json={})
    assert itself.status_code in (400, 422)
    twice = lifecycle_client.put(
        "/v1/quotas/top", json={"children": [{"name": "x"}, {"name": "x"}]}
    )
    assert twice.status_code == 422 and problems(twice) == [
        "children[1]: quota 'x' appears twice in this tree"
    ]
    elsewhere = lifecycle_client.put("/v1/quotas/top", json={"children": [{"name": "leaf"}]})
    assert elsewhere.status_code == 422
    assert lifecycle_client.get("/v1/quotas").status_code == 200


def test_metrics_label_unknown_paths_and_methods_as_one_series(
    lifecycle_client: TestClient,
) -> None:
    """Defect 9: made-up paths and methods must not create a metrics series each."""
    for index in range(50):
        lifecycle_client.get(f"/made-up/{index}")
        lifecycle_client.request(f"BREW{index}", "/v1/jobs")
    text = lifecycle_client.get("/metrics").text
    assert "made-up" not in text and "BREW" not in text
    series = [line for line in text.splitlines() if line.startswith("flotilla_api_requests_total{")]
    assert len(series) <= 6, series


def test_a_body_over_the_limit_is_413_and_not_stored(any_store: SqlStore) -> None:
    app = create_app(
        any_store, None, AuthSettings.disabled(), limits=ServerLimits(max_body_bytes=1000)
    )
    client = TestClient(app)
    body = spec("big", annotations={"blob": "x" * 5000})
    assert client.post("/v1/jobs", json=body).status_code == 413
    assert any_store.list_jobs().jobs == []
    assert client.post("/v1/jobs", json=spec("small")).status_code == 201


def test_a_server_on_loopback_answers_only_to_loopback_host_names(any_store: SqlStore) -> None:
    app = create_app(any_store, None, AuthSettings.disabled(), allowed_hosts=LOOPBACK_HOSTS)
    for host, status in (
        ("localhost:8467", 200),
        ("127.0.0.1", 200),
        ("[::1]:80", 200),
        ("evil.example", 403),
        ("evil.example:8467", 403),
    ):
        assert TestClient(app).get("/v1/jobs", headers={"host": host}).status_code == status, host


def test_event_streams_are_limited_per_client_and_in_all(any_store: SqlStore) -> None:
    context = ServerContext(
        store=any_store,
        scheduler=None,
        auth=AuthSettings.disabled(),
        limits=ServerLimits(event_streams_per_client=2, event_streams_total=3),
    )
    context.open_stream("a")
    context.open_stream("a")
    with pytest.raises(ApiError) as per_client:
        context.open_stream("a")
    assert per_client.value.status == 429
    context.open_stream("b")
    with pytest.raises(ApiError) as in_all:
        context.open_stream("c")
    assert in_all.value.status == 503
    context.close_stream("a")
    context.open_stream("c")


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"retry": {"limit": 1, "delay": "99999999999h"}}, "retry.delay"),
        ({"retry": {"limit": 1, "max_delay": 1e300}}, "retry.max_delay"),
        ({"max_runtime": 1e300}, "max_runtime"),
        ({"duration": 1e300}, "duration"),
        ({"gang": {"timeout": 1e300}}, "gang.timeout"),
        ({"array": {"size": 2, "parallelism": 10**30}}, "array.parallelism"),
        ({"payload": {"sim": {"duration": 1e300}}}, "payload.sim.duration"),
        (
            {"tasks": [{"name": "m", "resources": {"cpu": "1e300", "memory": "1e30Ei"}}]},
            "tasks[0].resources.cpu",
        ),
    ],
)
def test_unbounded_durations_and_amounts_are_refused_naming_the_field(
    lifecycle_client: TestClient, any_store: SqlStore, fields: dict[str, Any], path: str
) -> None:
    """Issue 23: a retry delay of 99999999999h was stored, then overflowed inside the
    scheduling loop (dropping the rest of that poll for everyone)."""
    response = lifecycle_client.post("/v1/jobs", json=spec("huge", **fields))
    assert response.status_code == 422, response.text
    assert any(line.startswith(f"{path}:") for line in problems(response)), problems(response)
    assert any_store.list_jobs().jobs == []


def test_the_longest_allowed_retry_delay_is_accepted(lifecycle_client: TestClient) -> None:
    body = spec("patient", retry={"limit": 1, "delay": "87600h", "max_delay": "87600h"})
    assert lifecycle_client.post("/v1/jobs", json=body).status_code == 201


@pytest.mark.parametrize("weight", [1e308, 1e-320])
def test_extreme_queue_and_quota_weights_are_refused(
    lifecycle_client: TestClient, weight: float
) -> None:
    queue = lifecycle_client.put("/v1/queues/heavy", json={"weight": weight})
    assert queue.status_code == 422, queue.text
    assert problems(queue)[0].startswith("weight:")
    quota = lifecycle_client.put("/v1/quotas/heavy", json={"weight": weight})
    assert quota.status_code == 422, quota.text
    assert problems(quota)[0].startswith("weight:")
    assert [q["name"] for q in lifecycle_client.get("/v1/queues").json()] == ["team-a", "team-b"]
    assert lifecycle_client.get("/v1/quotas").json() == []


def test_a_quota_min_above_its_max_is_refused_naming_the_field(
    lifecycle_client: TestClient,
) -> None:
    response = lifecycle_client.put(
        "/v1/quotas/upside-down", json={"min": {"cpu": 10}, "max": {"cpu": 1, "memory": "1Gi"}}
    )
    assert response.status_code == 422, response.text
    [line] = problems(response)
    assert line.startswith("max:") and "min.cpu" in line
    nested = lifecycle_client.put(
        "/v1/quotas/top", json={"children": [{"name": "c", "min": {"gpu": 4}, "max": {"gpu": 2}}]}
    )
    assert nested.status_code == 422 and problems(nested)[0].startswith("children[0].max:")
    assert lifecycle_client.get("/v1/quotas").json() == []


def test_a_fleet_with_unbounded_numbers_is_refused_naming_each_field(
    lifecycle_client: TestClient,
) -> None:
    fleet = {
        "clusters": [{"name": "c", "nodes": [{"name": "n", "count": 10**12, "resources": {}}]}],
        "priority_classes": [{"name": "high", "value": 10**30}],
        "queues": [{"name": "q", "weight": 1e308}],
        "quotas": [{"name": "r", "min": {"cpu": 2}, "max": {"cpu": 1}}],
    }
    response = lifecycle_client.put("/v1/fleet", json=fleet)
    assert response.status_code == 422, response.text
    found = problems(response)
    for path in (
        "clusters[0].nodes[0].count:",
        "priority_classes[0].value:",
        "queues[0].weight:",
        "quotas[0].max:",
    ):
        assert any(line.startswith(path) for line in found), (path, found)


def test_a_bulk_cancel_or_filter_with_thousands_of_labels_is_a_422(
    lifecycle_client: TestClient,
) -> None:
    """Issue 23: 10,000 labels made one query of 10,000 conditions, which SQLite refuses
    (a 500)."""
    labels = {f"k{index}": "v" for index in range(10_000)}
    response = lifecycle_client.post("/v1/jobs/cancel", json={"labels": labels})
    assert response.status_code == 422, response.text[:500]
    assert problems(response)[0].startswith("labels:")
    query = "&".join(f"label=k{index}=v" for index in range(1000))
    assert lifecycle_client.get(f"/v1/jobs?{query}").status_code == 422
    few = {f"k{index}": "v" for index in range(64)}
    assert lifecycle_client.post("/v1/jobs/cancel", json={"labels": few}).status_code == 200
