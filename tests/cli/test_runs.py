"""``flotilla runs`` (and its Slurm name ``sacct``): the per-run report as a table and JSON,
against the real API: exit code, nodes, elapsed, CPU time, peak memory, GPU use; ``-`` where
a figure was not measured."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner, Result

from flotilla.cli import client as cli_client
from flotilla.cli.main import app
from flotilla.cli.runs import duration
from flotilla.model import JobSpec, QueueSpec
from flotilla.model.gpu_use import GpuUse
from flotilla.model.run_resources import RunResources
from flotilla.server import AuthSettings, create_app
from flotilla.store import JobState, SqlStore
from tests.server.api_support import FakeScheduler, spec

MIB = 2**20


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SqlStore]:
    """``train`` (team-a, ana) ended with exit 3 and measured figures, ``etl`` (team-b, bo)
    still running; the CLI pointed at the app."""
    store = SqlStore.open(f"sqlite:///{tmp_path}/flotilla.db")
    store.put_queue(QueueSpec(name="team-a"))
    store.put_queue(QueueSpec(name="team-b"))
    specs = [
        JobSpec.model_validate(spec("train", user="ana")),
        JobSpec.model_validate(spec("etl", "team-b", user="bo")),
    ]
    train, etl = store.submit_jobs(specs)
    for job_id, node in ((train, "gpu-1"), (etl, "cpu-7")):
        store.record_run(
            job_id, "c1", {"placements": [{"task": "main", "replica": 0, "node": node}]}
        )
        store.transition(job_id, JobState.RUNNING, "started")
    store.transition(train, JobState.FAILED, "exited 3", exit_code=3)
    [run] = store.runs(train)
    store.record_run_resources({run.id: RunResources(cpu_seconds=3725.0, memory_peak=512 * MIB)})
    use = GpuUse(memory_peak=8 * 2**30, held_gpu_seconds=100.0, used_gpu_seconds=75.0, samples=3)
    store.record_gpu_use({run.id: use})
    application = create_app(store, FakeScheduler(), AuthSettings.disabled(), poll_interval=0)

    def factory(server: str, token: str | None) -> httpx.Client:
        return TestClient(application, base_url=server)

    monkeypatch.setattr(cli_client, "client_factory", factory)
    yield store
    store.close()


def run(*args: str, command: str = "runs") -> Result:
    return CliRunner().invoke(app, [command, *args], terminal_width=160)


def test_the_table_has_a_row_per_run_with_its_figures_and_dashes_where_unmeasured(
    store: SqlStore,
) -> None:
    result = run("--since", "1d")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if line.startswith("JOB"))
    assert header.split() == [
        "JOB", "NAME", "QUEUE", "OWNER", "STATE", "EXIT", "NODES", "ELAPSED", "CPU", "MAXRSS", "GPU"
    ]  # fmt: skip
    train = next(line.split() for line in lines if " train " in line)
    assert train[1:7] == ["train", "team-a", "ana", "failed", "3", "gpu-1"]
    assert train[-4:] == ["1:02:05", "512Mi", "8Gi", "75%"]  # CPU, MAXRSS, GPU peak and eff.
    assert train[0].endswith(".1")  # JOB.ATTEMPT, as sacct's JOBID.STEP
    etl = next(line.split() for line in lines if " etl " in line)
    assert etl[4:7] == ["running", "-", "cpu-7"] and etl[-3:] == ["-", "-", "-"]


def test_filters_and_json_and_the_slurm_name(store: SqlStore) -> None:
    as_json = run("--queue", "team-b", "--json")
    assert as_json.exit_code == 0, as_json.output
    [etl] = json.loads(as_json.output)["runs"]
    assert etl["name"] == "etl" and etl["cpu_seconds"] is None
    by_user = json.loads(run("--user", "ana", "--format", "json", command="sacct").output)
    assert [row["name"] for row in by_user["runs"]] == ["train"]
    assert by_user["runs"][0]["memory_peak"] == 512 * MIB
    failed = run("--state", "failed", "--owner", "ana")
    assert "train" in failed.output and "etl" not in failed.output
    assert "no runs since" in run("--state", "cancelled").output


def test_a_bad_state_is_refused_naming_the_flag(store: SqlStore) -> None:
    result = run("--state", "COMPLETED")
    assert result.exit_code == 2
    assert "--state: COMPLETED is not a run state" in result.output


def test_durations_read_as_sacct_writes_them() -> None:
    assert duration(None) == "-"
    assert duration(0.0042) == "4ms"
    assert duration(12.34) == "12.3s"
    assert duration(3725) == "1:02:05"
    assert duration(90061) == "1-01:01:01"


def test_describe_shows_each_runs_cpu_time_and_peak_memory(store: SqlStore) -> None:
    train = next(job for job in store.list_jobs().jobs if job.name == "train")
    described = CliRunner().invoke(app, ["describe", train.id], terminal_width=200)
    assert described.exit_code == 0, described.output
    header = next(line for line in described.output.splitlines() if "ATTEMPT" in line)
    assert header.split()[-2:] == ["CPU", "MAXRSS"]
    [row] = [line for line in described.output.splitlines() if "512Mi" in line]
    assert row.split()[-2:] == ["1:02:05", "512Mi"]
