"""``flotilla simulate``: exit codes, the JSON report contract, --output, --until, --check."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from flotilla.cli.main import app
from tests.builders import Data, cluster, job, jobs, nodes, scenario
from tests.special_files import character_device_copy_of_null, fifo_reader

GOOD = scenario(
    name="cli-basic",
    clusters=[cluster("east", nodes(1, cpu=2, gpu=1))],
    jobs=[
        job("train", cpu=1, gpu=1, duration=10),
        jobs("wait", n=2, cpu=2, duration=5),
    ],
    expect=[
        {"at": 0, "job": "train", "state": "running", "cluster": "east"},
        {"at": "end", "job": "wait-1", "state": "succeeded"},
    ],
)


def write(tmp_path: Path, data: Data, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data))
    return path


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, ["simulate", *args])


def flat(text: str) -> str:
    """Rich wraps long lines on a narrow terminal; compare text with wrapping undone."""
    return " ".join(text.split())


def test_valid_scenario_exits_0_and_prints_json(tmp_path: Path) -> None:
    result = invoke(str(write(tmp_path, GOOD)), "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["scenario"] == "cli-basic"


def test_json_report_has_every_contract_field(tmp_path: Path) -> None:
    result = invoke(str(write(tmp_path, GOOD)), "--format", "json", "--until", "2")
    report: dict[str, Any] = json.loads(result.stdout)
    assert {"scenario", "end_time", "jobs", "events", "queues", "summary"} <= report.keys()
    for entry in report["jobs"]:
        assert {
            "name",
            "queue",
            "state",
            "cluster",
            "placements",
            "submitted_at",
            "started_at",
            "finished_at",
            "preemptions",
            "reason",
        } <= entry.keys()
    train = next(j for j in report["jobs"] if j["name"] == "train")
    assert train["placements"] == [{"task": "main", "replica": 0, "node": "n-0", "gpus": [0]}]
    for event in report["events"]:
        assert {"time", "job", "event"} <= event.keys()
        if event["event"] in ("scheduled", "started"):
            assert {"cluster", "nodes"} <= event.keys()
    assert [e["time"] for e in report["events"]] == sorted(e["time"] for e in report["events"])
    for entry in report["queues"]:
        assert {"name", "allocated", "dominant_share"} <= entry.keys()
    assert report["queues"][0]["allocated"] == {"cpu": 1, "gpu": 1}
    assert report["queues"][0]["dominant_share"] == 1.0
    assert {"cycles", "jobs", "scheduled", "utilization", "mean_wait", "wall_seconds"} <= report[
        "summary"
    ].keys()
    assert report["summary"]["jobs"] == 3


def test_output_writes_the_report_to_a_file(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = invoke(str(write(tmp_path, GOOD)), "--format", "json", "--output", str(out))
    assert result.exit_code == 0
    assert result.stdout == ""
    assert json.loads(out.read_text())["scenario"] == "cli-basic"


def test_table_format_summarises_and_lists_waiting_jobs(tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    data = scenario(clusters=[cluster("c", nodes(1, cpu=1))], jobs=[job("never", cpu=4)])
    result = invoke(str(write(tmp_path, data)), "--format", "table", "--output", str(out))
    assert result.exit_code == 0
    text = flat(out.read_text())
    assert "Scenario test" in text
    assert "Jobs still queued (1)" in text
    assert "never" in text


def test_until_stops_at_that_time(tmp_path: Path) -> None:
    result = invoke(str(write(tmp_path, GOOD)), "--format", "json", "--until", "3")
    report = json.loads(result.stdout)
    assert report["end_time"] == 3
    assert next(j for j in report["jobs"] if j["name"] == "train")["state"] == "running"


def test_json_scenario_files_are_accepted(tmp_path: Path) -> None:
    result = invoke(str(write(tmp_path, GOOD, "s.json")), "--check", "--format", "json")
    assert result.exit_code == 0, result.stderr


def test_check_passing_exits_0_and_says_so(tmp_path: Path) -> None:
    result = invoke(str(write(tmp_path, GOOD)), "--check", "--format", "json")
    assert result.exit_code == 0
    assert "all 2 expectations hold" in result.stderr


def test_check_failing_exits_1_naming_each_failed_expectation(tmp_path: Path) -> None:
    data = {
        **GOOD,
        "expect": [
            {"at": 0, "job": "train", "state": "running"},
            {"at": 0, "job": "wait-1", "state": "running"},
            {"at": 0, "queue": "q", "running": 3},
            {"at": 0, "job": "train", "cluster": "east", "reason": "nope"},
        ],
    }
    result = invoke(str(write(tmp_path, data)), "--check", "--format", "json")
    assert result.exit_code == 1
    errors = flat(result.stderr)
    assert "FAILED expect[1] at t=0: job wait-1 is queued" in errors
    assert "expected running" in errors
    assert "FAILED expect[2] at t=0: queue q has 1 running, expected 3" in errors
    assert "FAILED expect[3] at t=0: job train reason is None" in errors
    assert "expect[0]" not in errors
    assert "1 of 4 expectations hold" in errors


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"jobs": [job(cpu=-1)]}, "jobs[0].tasks[0].resources.cpu: must be >= 0"),
        ({"jobs": [job(queue="ghost")]}, "jobs[0].queue: unknown queue 'ghost'"),
        ({"bogus": True}, "bogus: unknown field"),
        (
            {"settings": {"assignment_strategy": "cheapest-moon"}},
            "settings.assignment_strategy: unknown assignment strategy 'cheapest-moon'",
        ),
        (
            {"settings": {"plugins": {"profile": "fastest"}}},
            "settings.plugins.profile: unknown profile 'fastest'",
        ),
    ],
    ids=["negative", "unknown-queue", "unknown-field", "strategy", "profile"],
)
def test_invalid_scenario_exits_2_naming_the_field(
    tmp_path: Path, change: Data, field: str
) -> None:
    result = invoke(str(write(tmp_path, {**GOOD, **change})), "--format", "json")
    assert result.exit_code == 2
    assert "invalid scenario" in result.stderr
    assert field in flat(result.stderr)
    assert result.stdout == ""


def test_unknown_strategy_message_lists_the_known_ones(tmp_path: Path) -> None:
    data = {**GOOD, "settings": {"assignment_strategy": "nope"}}
    result = invoke(str(write(tmp_path, data)))
    assert "known: cluster-only, cost-optimized, resource-aware" in flat(result.stderr)


def test_missing_file_exits_2(tmp_path: Path) -> None:
    result = invoke(str(tmp_path / "absent.yaml"))
    assert result.exit_code == 2
    assert "cannot read file" in result.stderr


def test_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.startswith("flotilla ")


def test_report_to_a_fifo_leaves_it_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "report"
    os.mkfifo(fifo)
    with fifo_reader(fifo) as received:
        result = invoke(str(write(tmp_path, GOOD)), "--format", "json", "-o", str(fifo))
    assert result.exit_code == 0, result.output
    assert json.loads(received())["scenario"] == "cli-basic"
    assert stat.S_ISFIFO(fifo.stat().st_mode)


@pytest.mark.parametrize("output_format", ["json", "table"])
def test_report_to_a_copy_of_dev_null_leaves_it_a_device(
    tmp_path: Path, output_format: str
) -> None:
    null = character_device_copy_of_null(tmp_path)
    result = invoke(str(write(tmp_path, GOOD)), "--format", output_format, "-o", str(null))
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(null.stat().st_mode)


def test_report_to_a_directory_is_refused_before_simulating(tmp_path: Path) -> None:
    result = invoke(str(write(tmp_path, GOOD)), "--format", "json", "-o", str(tmp_path))
    assert result.exit_code == 2
    assert f"--output: {tmp_path}: is a directory" in flat(result.stderr)


def test_table_report_to_a_file_is_written_whole(tmp_path: Path) -> None:
    target = tmp_path / "report.txt"
    result = invoke(str(write(tmp_path, GOOD)), "--format", "table", "-o", str(target))
    assert result.exit_code == 0, result.output
    assert "east" in target.read_text()


def test_each_problem_is_one_line_however_narrow_the_terminal(tmp_path: Path) -> None:
    path = write(tmp_path, {**GOOD, "jobs": [job("neg", cpu=-1)], "bogus": True})
    result = CliRunner().invoke(app, ["simulate", str(path)], env={"COLUMNS": "30"})
    assert result.exit_code == 2
    lines = [line.strip() for line in result.stderr.splitlines()]
    assert lines[0].startswith("error: ") and lines[0].endswith(": invalid scenario")
    assert sorted(lines[1:]) == [
        "bogus: unknown field",
        "jobs[0].tasks[0].resources.cpu: must be >= 0",
    ]
