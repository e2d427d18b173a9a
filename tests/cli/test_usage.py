"""``flotilla usage``: the accounting report as a table, JSON and CSV, against the real API."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner, Result

from flotilla.cli import client as cli_client
from flotilla.cli.main import app
from flotilla.model import JobSpec, QueueSpec
from flotilla.model.gpu_use import GpuUse
from flotilla.server import AuthSettings, create_app
from flotilla.store import JobState, SqlStore
from tests.server.api_support import FakeScheduler, spec


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SqlStore]:
    """Two queues, a job that ran and one still running; the CLI pointed at the app."""
    store = SqlStore.open(f"sqlite:///{tmp_path}/flotilla.db")
    store.put_queue(QueueSpec(name="team-a"))
    store.put_queue(QueueSpec(name="team-b"))
    gpu = {"name": "main", "resources": {"cpu": 8, "memory": "4Gi", "gpu": 2}}
    specs = [
        JobSpec.model_validate(spec("train", tasks=[gpu], user="ana")),
        JobSpec.model_validate(spec("etl", "team-b", user="bo")),
    ]
    for job_id in store.submit_jobs(specs):
        store.record_run(job_id, "c1", {"placements": [{"task": "main", "replica": 0}]})
        store.transition(job_id, JobState.RUNNING, "started")
    application = create_app(store, FakeScheduler(), AuthSettings.disabled(), poll_interval=0)

    def factory(server: str, token: str | None) -> httpx.Client:
        return TestClient(application, base_url=server)

    monkeypatch.setattr(cli_client, "client_factory", factory)
    yield store
    store.close()


def run(*args: str) -> Result:
    return CliRunner().invoke(app, ["usage", *args])


def test_usage_table_has_a_row_per_queue_and_a_total(store: SqlStore) -> None:
    result = run("--since", "1d")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.startswith("QUEUE") and "GPU-H" in line for line in lines)
    assert [line.split()[0] for line in lines if line.startswith("team-")] == [
        "team-a",
        "team-b",
    ]
    assert any(line.startswith("TOTAL") for line in lines)


def test_usage_json_and_csv_by_owner(store: SqlStore) -> None:
    as_json = run("--by", "owner", "--format", "json")
    assert as_json.exit_code == 0, as_json.output
    report = json.loads(as_json.output)
    assert [row["owner"] for row in report["rows"]] == ["ana", "bo"]
    assert report["rows"][0]["gpu_hours"] > 0
    as_csv = run("--by", "owner", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(as_csv.output)))
    assert list(rows[0]) == [
        "owner",
        "jobs",
        "runs",
        "elapsed_hours",
        "cpu_hours",
        "memory_gib_hours",
        "gpu_hours",
        "gpu_used_hours",
        "gpu_efficiency",
    ]
    assert [(row["owner"], row["jobs"]) for row in rows] == [("ana", "1"), ("bo", "1")]


def test_a_bad_range_is_the_servers_one_line_and_exit_1(store: SqlStore) -> None:
    result = run("--since", "yesterday-ish")
    assert result.exit_code == 1
    assert "since: expected an ISO 8601 time or a duration such as 7d" in result.output


def test_gpu_use_shows_in_describe_and_usage(store: SqlStore) -> None:
    """Issue 26: a run's measured GPU use (as its backend reported it) in ``describe`` and the
    API, and GPU-hours used with the efficiency in ``usage``."""
    train = next(job for job in store.list_jobs().jobs if job.name == "train")
    [run_record] = store.runs(train.id)
    use = GpuUse(
        memory_used=60 * 2**30,
        memory_peak=61 * 2**30,
        utilization=48.5,
        held_gpu_seconds=2 * 3600.0,
        used_gpu_seconds=0.5 * 3600.0,
        sampled_at=1.0,
        samples=12,
    )
    store.record_gpu_use({run_record.id: use})
    described = CliRunner().invoke(app, ["describe", train.id], terminal_width=160)
    assert described.exit_code == 0, described.output
    [line] = [line for line in described.output.splitlines() if "61Gi" in line]
    assert line.split() == ["1", "60Gi", "61Gi", "48%", "2.000", "0.500", "25%"]
    as_json = CliRunner().invoke(app, ["describe", train.id, "--format", "json"])
    gpu = json.loads(as_json.output)["job"]["runs"][0]["gpu"]
    assert gpu["gpu_hours_used"] == 0.5 and gpu["efficiency"] == 0.25
    report = json.loads(run("--format", "json").output)
    [team_a] = [row for row in report["rows"] if row["queue"] == "team-a"]
    assert team_a["gpu_used_hours"] > 0 and team_a["gpu_efficiency"] is not None
    table = CliRunner().invoke(app, ["usage", "--since", "1d"], terminal_width=200)
    assert "GPU-H USED" in table.output and "GPU-EFF" in table.output
