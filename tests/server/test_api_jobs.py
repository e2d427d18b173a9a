"""Job routes over a real store: submission (atomic, validated), listing, cancel, priority.

The lifecycle tests use ``lifecycle_client`` and so run on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import threading
from typing import Any

from fastapi.testclient import TestClient

from flotilla.store import JobState, SqlStore
from tests.server.api_support import FakeScheduler, spec, submit
from tests.timing import limit


def test_submit_one_job_stores_it_queued_and_wakes_the_scheduler(
    lifecycle_client: TestClient, scheduler: FakeScheduler
) -> None:
    response = lifecycle_client.post("/v1/jobs", json=spec("train", labels={"team": "vision"}))
    assert response.status_code == 201
    body = response.json()
    assert body["jobs"] == [
        {"id": body["ids"][0], "name": "train", "queue": "team-a", "array_id": None}
    ]
    job = lifecycle_client.get(f"/v1/jobs/{body['ids'][0]}").json()
    assert job["state"] == "queued" and job["labels"] == {"team": "vision"}
    assert job["spec"]["payload"] == {"command": ["echo", "train"]}
    assert scheduler.wakes == 1


def test_batch_is_stored_whole_in_order_with_count_expanded(lifecycle_client: TestClient) -> None:
    ids = submit(
        lifecycle_client,
        {"jobs": [spec("prep"), spec("sweep", count=2, queue="team-b")]},
    )
    names = [lifecycle_client.get(f"/v1/jobs/{job_id}").json()["name"] for job_id in ids]
    assert names == ["prep", "sweep-0", "sweep-1"]


def test_a_bad_job_in_a_batch_stores_nothing_and_names_the_field(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    bad = spec("b", tasks=[{"name": "main", "resources": {"cpu": -1}}])
    response = lifecycle_client.post("/v1/jobs", json={"jobs": [spec("a"), bad]})
    assert response.status_code == 422
    assert response.json()["problems"] == ["jobs[1].tasks[0].resources.cpu: must be >= 0"]
    assert any_store.list_jobs().jobs == []


def test_every_problem_of_every_job_is_listed_at_once(client: TestClient) -> None:
    jobs = [
        {"name": "a", "queue": "team-a", "tasks": [], "colour": "red"},
        spec("b", type="spark"),
        spec("c", payload={"command": []}),
        spec("d", cancel_at=5),
    ]
    response = client.post("/v1/jobs", json={"jobs": jobs})
    assert response.status_code == 422
    problems = response.json()["problems"]
    assert "jobs[0].colour: unknown field" in problems
    assert any(line.startswith("jobs[0].tasks: ") for line in problems)
    assert any(line.startswith("jobs[1].type: 'spark' is not supported yet") for line in problems)
    assert any(line.startswith("jobs[2].payload.command: ") for line in problems)
    assert "jobs[3].cancel_at: only meaningful in a simulation scenario" in problems


def test_a_single_job_names_fields_from_its_top(client: TestClient) -> None:
    response = client.post("/v1/jobs", json=spec("x", priority="high"))
    assert response.status_code == 422
    assert [line.split(":")[0] for line in response.json()["problems"]] == ["priority"]


def test_malformed_bodies_are_rejected(client: TestClient) -> None:
    not_json = client.post("/v1/jobs", content=b"{", headers={"Content-Type": "application/json"})
    assert not_json.status_code == 400 and "not valid JSON" in not_json.json()["message"]
    empty = client.post("/v1/jobs", json={"jobs": []})
    assert empty.status_code == 422
    assert empty.json()["problems"] == ["jobs: must be a non-empty list of jobs"]


def test_unknown_queue_is_400_naming_it_and_stores_nothing(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    response = lifecycle_client.post("/v1/jobs", json={"jobs": [spec("a"), spec("b", "nope")]})
    assert response.status_code == 400
    assert response.json()["problems"] == ["jobs[1].queue: no such queue 'nope'"]
    assert any_store.list_jobs().jobs == []


def test_a_name_twice_in_one_submission_is_409_and_stores_nothing(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    """A name may be used again (issue 37), but not twice in one submission: its
    dependencies name its jobs."""
    submit(lifecycle_client, spec("train"))
    body = {"jobs": [spec("new"), spec("train"), spec("train")]}
    response = lifecycle_client.post("/v1/jobs", json=body)
    assert response.status_code == 409
    assert "'train'" in response.json()["message"]
    assert [job.name for job in any_store.list_jobs().jobs] == ["train"]


def test_list_filters_by_queue_state_owner_and_labels(client: TestClient, store: SqlStore) -> None:
    a, b, c = submit(
        client,
        {
            "jobs": [
                spec("a", labels={"team": "vision", "tier": "gold"}),
                spec("b", labels={"team": "vision"}, user="bo"),
                spec("c", "team-b", labels={"team": "nlp"}),
            ]
        },
    )
    store.record_run(a, "c1", {})

    def ids(**params: Any) -> list[str]:
        response = client.get("/v1/jobs", params=params)
        assert response.status_code == 200, response.text
        return [job["id"] for job in response.json()["jobs"]]

    assert ids(queue="team-b") == [c]
    assert ids(state=["queued"]) == [b, c]
    assert ids(state=["leased", "running"]) == [a]
    assert ids(owner="bo") == [b]
    assert ids(label=["team=vision"]) == [a, b]
    assert ids(label=["team=vision", "tier=gold"]) == [a]
    bad = client.get("/v1/jobs", params={"label": "team"})
    assert bad.status_code == 422  # the OpenAPI pattern says key=value
    assert bad.json()["problems"][0].startswith("label")
    assert client.get("/v1/jobs", params={"state": "sleeping"}).status_code == 422


def test_list_pages_by_cursor(lifecycle_client: TestClient) -> None:
    ids = submit(lifecycle_client, {"jobs": [spec(f"j{index}") for index in range(5)]})
    seen: list[list[str]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor is not None:
            params["after"] = cursor
        page = lifecycle_client.get("/v1/jobs", params=params).json()
        seen.append([job["id"] for job in page["jobs"]])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [ids[:2], ids[2:4], ids[4:]]
    assert lifecycle_client.get("/v1/jobs", params={"limit": 0}).status_code == 422


def test_job_detail_has_runs_and_the_live_pending_reason(
    client: TestClient, store: SqlStore, scheduler: FakeScheduler
) -> None:
    waiting, placed = submit(client, {"jobs": [spec("w"), spec("p")]})
    assert client.get(f"/v1/jobs/{waiting}").json()["pending_reason"] == "submitted"
    scheduler.reasons[waiting] = "queue team-a is at its quota max for gpu"
    assert (
        client.get(f"/v1/jobs/{waiting}").json()["pending_reason"]
        == "queue team-a is at its quota max for gpu"
    )
    run = store.record_run(placed, "c1", {"tasks": [{"task": "main", "replica": 0, "node": "n1"}]})
    detail = client.get(f"/v1/jobs/{placed}").json()
    assert detail["pending_reason"] is None
    assert [item["id"] for item in detail["runs"]] == [run.id]
    assert detail["run"]["cluster"] == "c1"
    missing = client.get("/v1/jobs/nope")
    assert missing.status_code == 404 and "nope" in missing.json()["message"]


def test_cancel_a_queued_job_now_and_a_running_one_by_request(
    lifecycle_client: TestClient, any_store: SqlStore, scheduler: FakeScheduler
) -> None:
    queued, active = submit(lifecycle_client, {"jobs": [spec("q"), spec("a")]})
    any_store.record_run(active, "c1", {})
    any_store.transition(active, JobState.RUNNING, "started")
    wakes = scheduler.wakes
    now = lifecycle_client.post(f"/v1/jobs/{queued}/cancel", json={"reason": "not needed"})
    assert now.status_code == 200 and now.json()["state"] == "cancelled"
    asked = lifecycle_client.post(f"/v1/jobs/{active}/cancel").json()
    assert asked["state"] == "running" and asked["cancel_requested"]
    assert scheduler.wakes == wakes + 2
    # The local scheduler is told which jobs: it stops the run before reading the feed.
    assert scheduler.cancelled_jobs[-2:] == [queued, active]
    events = lifecycle_client.get(f"/v1/jobs/{queued}/events").json()
    assert events[-1]["to_state"] == "cancelled" and events[-1]["reason"] == "not needed"
    assert lifecycle_client.post("/v1/jobs/nope/cancel").status_code == 404


def test_cancel_by_queue_and_labels_reports_what_it_cancelled(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    a, b, c, done = submit(
        lifecycle_client,
        {
            "jobs": [
                spec("a", labels={"sweep": "s1"}),
                spec("b", labels={"sweep": "s2"}),
                spec("c", "team-b", labels={"sweep": "s1"}),
                spec("done", labels={"sweep": "s1"}),
            ]
        },
    )
    any_store.record_run(done, "c1", {})
    any_store.transition(done, JobState.SUCCEEDED, "exit 0")
    by_labels = lifecycle_client.post("/v1/jobs/cancel", json={"labels": {"sweep": "s1"}})
    assert by_labels.status_code == 200
    assert sorted(job["id"] for job in by_labels.json()["cancelled"]) == sorted([a, c])
    by_queue = lifecycle_client.post("/v1/jobs/cancel", json={"queue": "team-a"}).json()
    assert [job["id"] for job in by_queue["cancelled"]] == [b]
    assert any_store.get_job(done).state is JobState.SUCCEEDED
    refused = lifecycle_client.post("/v1/jobs/cancel", json={})
    assert refused.status_code == 400 and "refusing to cancel every job" in refused.text


def test_reprioritize_a_waiting_job_but_not_a_running_one(
    lifecycle_client: TestClient, any_store: SqlStore
) -> None:
    waiting, running = submit(lifecycle_client, {"jobs": [spec("w"), spec("r")]})
    response = lifecycle_client.post(
        f"/v1/jobs/{waiting}/priority", json={"priority": 7, "reason": "deadline"}
    )
    assert response.status_code == 200 and response.json()["priority"] == 7
    assert any_store.get_job(waiting).priority == 7
    last = lifecycle_client.get(f"/v1/jobs/{waiting}/events").json()[-1]
    assert last["kind"] == "reprioritized" and "0 → 7" in last["reason"]
    any_store.record_run(running, "c1", {})
    conflict = lifecycle_client.post(f"/v1/jobs/{running}/priority", json={"priority": 7})
    assert conflict.status_code == 409 and "only a waiting job" in conflict.json()["message"]
    bad = lifecycle_client.post(f"/v1/jobs/{waiting}/priority", json={"priority": "top"})
    assert bad.status_code == 422 and bad.json()["problems"][0].startswith("priority: ")


def test_a_priority_class_is_refused_naming_the_field(client: TestClient) -> None:
    body = spec("urgent")
    body["priority_class"] = "high"
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422
    assert any(line.startswith("priority_class:") for line in response.json()["problems"])


def test_listing_an_unknown_queue_is_404_naming_it(client: TestClient) -> None:
    response = client.get("/v1/jobs", params={"queue": "NOPE"})
    assert response.status_code == 404
    assert response.json()["message"] == "no such queue: NOPE"
    assert client.get("/v1/jobs", params={"queue": "team-a"}).status_code == 200


def test_a_large_submission_waits_for_a_read_under_way_and_a_small_one_does_not(
    client: TestClient, scheduler: FakeScheduler
) -> None:
    # A batch of a thousand jobs is hundreds of milliseconds of Python: while a read is
    # under way it paces itself (``Precedence.pace``) instead of sharing the interpreter.
    precedence = scheduler.precedence
    precedence.max_pause = 600.0
    large = {"jobs": [spec(f"bulk-{index}") for index in range(200)]}
    answers: list[int] = []
    with precedence.urgent():  # a GET, in flight on another thread
        assert client.post("/v1/jobs", json=spec("small")).status_code == 201
        thread = threading.Thread(
            target=lambda: answers.append(client.post("/v1/jobs", json=large).status_code)
        )
        thread.start()
        thread.join(timeout=0.5)
        assert answers == []  # still waiting for the read
    thread.join(timeout=limit(60))
    assert answers == [201]
