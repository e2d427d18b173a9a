"""Events (history and live stream), logs through the scheduler handle, why, the report."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient

from flotilla.model import QueueSpec, QuotaSpec
from flotilla.server import AuthSettings, create_app
from flotilla.service.handle import CycleReport
from flotilla.store import EventRecord, JobState, SqlStore
from tests.server.api_support import FakeScheduler, spec


def submit_one(client: TestClient, name: str = "train", **fields: Any) -> str:
    response = client.post("/v1/jobs", json=spec(name, **fields))
    assert response.status_code == 201, response.text
    job_id: str = response.json()["ids"][0]
    return job_id


def parse_sse(text: str) -> list[tuple[str, dict[str, Any], str | None]]:
    """(event kind, data, id) for each server-sent event."""
    messages = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        messages.append((fields["event"], json.loads(fields["data"]), fields.get("id")))
    return messages


def test_events_replay_the_history(lifecycle_client: TestClient, any_store: SqlStore) -> None:
    job_id = submit_one(lifecycle_client)
    any_store.record_run(job_id, "c1", {})
    any_store.transition(job_id, JobState.RUNNING, "started")
    events = lifecycle_client.get(f"/v1/jobs/{job_id}/events").json()
    assert [(e["kind"], e["to_state"]) for e in events] == [
        ("submitted", "queued"),
        ("transition", "leased"),
        ("transition", "running"),
    ]
    assert lifecycle_client.get("/v1/jobs/nope/events").status_code == 404


class CancelAfterFirstRead:
    """A store whose job is cancelled by "someone else" right after the stream's first
    read, so the stream must pick up a change that happened while it was open."""

    def __init__(self, store: SqlStore) -> None:
        self._store = store
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def events(self, job_id: str) -> list[EventRecord]:
        events = self._store.events(job_id)
        self.reads += 1
        if self.reads == 1:
            self._store.cancel(job_id, "cancelled while watched")
        return events


def test_event_stream_sends_history_then_live_changes_then_ends(
    store: SqlStore, scheduler: FakeScheduler
) -> None:
    watched = CancelAfterFirstRead(store)
    client = TestClient(create_app(watched, scheduler, AuthSettings.disabled(), poll_interval=0))
    job_id = submit_one(client)
    response = client.get(f"/v1/jobs/{job_id}/events/stream")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    messages = parse_sse(response.text)
    assert [(kind, data.get("to_state")) for kind, data, _ in messages] == [
        ("job-event", "queued"),
        ("job-event", "cancelled"),
        ("end", None),
    ]
    assert messages[-1][1] == {"state": "cancelled"}
    assert watched.reads >= 2


def test_event_stream_resumes_after_last_event_id(client: TestClient, store: SqlStore) -> None:
    job_id = submit_one(client)
    store.cancel(job_id, "x")
    first = store.events(job_id)[0].id
    response = client.get(f"/v1/jobs/{job_id}/events/stream", headers={"Last-Event-ID": str(first)})
    kinds = [(kind, data.get("to_state")) for kind, data, _ in parse_sse(response.text)]
    assert kinds == [("job-event", "cancelled"), ("end", None)]
    assert client.get("/v1/jobs/nope/events/stream").status_code == 404


def test_logs_come_from_the_scheduler_handle(
    client: TestClient, store: SqlStore, scheduler: FakeScheduler
) -> None:
    job_id = submit_one(client)
    no_run = client.get(f"/v1/jobs/{job_id}/logs")
    assert no_run.status_code == 404 and "has no run yet" in no_run.json()["message"]
    run = store.record_run(job_id, "c1", {})
    unknown = client.get(f"/v1/jobs/{job_id}/logs")
    assert unknown.status_code == 404 and run.id in unknown.json()["message"]
    scheduler.logs_by_run[run.id] = b"epoch 1\nepoch 2\n"
    scheduler.finished_runs.add(run.id)
    first = client.get(f"/v1/jobs/{job_id}/logs", params={"limit": 8}).json()
    assert (first["data"], first["next_offset"], first["complete"]) == ("epoch 1\n", 8, False)
    rest = client.get(
        f"/v1/jobs/{job_id}/logs",
        params={"offset": 8, "stream": "stderr", "task": "main", "replica": 0},
    ).json()
    assert (rest["data"], rest["complete"]) == ("epoch 2\n", True)
    asked = scheduler.log_requests[-1]
    assert (asked.stream.value, asked.task, asked.replica) == ("stderr", "main", 0)
    bad = client.get(f"/v1/jobs/{job_id}/logs", params={"replica": 3})
    assert bad.status_code == 400 and "replica 3" in bad.json()["message"]


def test_logs_without_a_local_scheduler_say_so(store: SqlStore) -> None:
    client = TestClient(create_app(store, None, AuthSettings.disabled()))
    job_id = submit_one(client)
    store.record_run(job_id, "c1", {})
    response = client.get(f"/v1/jobs/{job_id}/logs")
    assert response.status_code == 404 and "no scheduler" in response.json()["message"]


def test_why_explains_position_reason_and_quota(
    client: TestClient, store: SqlStore, scheduler: FakeScheduler
) -> None:
    store.put_quota(
        QuotaSpec(
            name="org",
            min={"gpu": 8},
            children=[QuotaSpec(name="vision", min={"gpu": 2}, max={"gpu": 4})],
        )
    )
    store.put_queue(QueueSpec(name="team-a", quota="vision"))
    first = submit_one(client, "first")
    second = submit_one(client, "second")
    scheduler.reasons[second] = "queue team-a is at its quota max for gpu"
    scheduler.cycle = CycleReport(number=3, running_by_queue={"team-a": 2})
    why = client.get(f"/v1/jobs/{second}/why").json()
    assert why["waiting"] and why["queue_position"] == 2 and why["queued_in_queue"] == 2
    assert why["reason"] == "queue team-a is at its quota max for gpu"
    assert [level["name"] for level in why["quota"]] == ["org", "vision"]
    assert why["quota"][1]["max"] == {"gpu": 4.0}
    assert why["queue_running"] == 2
    assert why["summary"] == (
        "job second is 2 of 2 queued in team-a: queue team-a is at its quota max for gpu"
    )
    store.record_run(first, "c1", {})
    running = client.get(f"/v1/jobs/{first}/why").json()
    assert not running["waiting"] and running["queue_position"] is None
    assert "on cluster c1" in running["summary"]


def test_report_has_the_last_cycle_and_queue_depths(
    client: TestClient, scheduler: FakeScheduler, store: SqlStore
) -> None:
    submit_one(client, "a")
    submit_one(client, "b", queue="team-b")
    scheduler.cycle = CycleReport(number=7, scheduled=2, leader=True, queued_by_queue={"x": 1})
    report = client.get("/v1/scheduling/report").json()
    assert report["scheduler"]["number"] == 7 and report["scheduler"]["scheduled"] == 2
    assert report["scheduler"]["queued_by_queue"] == {"x": 1}
    assert report["queues"] == {"team-a": {"queued": 1}, "team-b": {"queued": 1}}
    alone = TestClient(create_app(store, None, AuthSettings.disabled()))
    assert alone.get("/v1/scheduling/report").json()["scheduler"] is None
