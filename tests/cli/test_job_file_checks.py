"""A job file is checked on the client with the server's own rules (``flotilla.api``), without
loading the server: ``flotilla submit`` and the SDK refuse a bad file before any request, and
``flotilla submit --dry-run`` needs no server at all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from flotilla.cli.main import app
from flotilla.sdk.jobfile import submission_body

UNREACHABLE = "http://127.0.0.1:9"


def test_the_cli_and_the_sdk_load_neither_the_server_nor_fastapi(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nqueue: default\ntasks: [{name: main, resources: {cpu: 1}}]\n")
    check = (
        "import sys, flotilla.cli.main, flotilla.sdk\n"
        "from flotilla.sdk.jobfile import read_job_file\n"
        f"read_job_file({str(job)!r})\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('flotilla.server')"
        " or m == 'fastapi' or m.startswith('fastapi.'))\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_submit_dry_run_checks_the_file_and_sends_nothing(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "jobs:\n"
        "  - {name: a, queue: default, tasks: [{name: main, resources: {cpu: 1}}]}\n"
        "  - {name: b, queue: default, count: 2, tasks: [{name: main, resources: {cpu: 1}}]}\n"
    )
    checked = CliRunner().invoke(app, ["submit", str(good), "--dry-run", "--server", UNREACHABLE])
    assert checked.exit_code == 0, checked.output
    assert checked.output.strip() == f"{good}: 3 jobs valid; nothing was submitted"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: a\nqueue: default\ntasks: [{name: main, resources: {cpu: -1}}]\n")
    refused = CliRunner().invoke(app, ["submit", str(bad), "--dry-run", "--server", UNREACHABLE])
    assert refused.exit_code == 2
    assert "tasks[0].resources.cpu: must be >= 0" in refused.output


def test_a_priority_class_is_left_for_the_server_which_knows_the_fleet() -> None:
    spec = {
        "name": "a",
        "queue": "default",
        "priority_class": "urgent",
        "tasks": [{"name": "main", "resources": {"cpu": 1}}],
    }
    assert submission_body(spec) == spec


def test_a_key_given_twice_in_a_job_file_is_refused_as_fleet_apply_refuses_it(
    tmp_path: Path,
) -> None:
    """Issue 23: ``flotilla submit`` kept the last of two ``queue`` keys (PyYAML's way)."""
    twice = tmp_path / "twice.yaml"
    twice.write_text(
        "name: a\nqueue: team-a\nqueue: team-b\ntasks: [{name: main, resources: {cpu: 1}}]\n"
    )
    refused = CliRunner().invoke(app, ["submit", str(twice), "--dry-run", "--server", UNREACHABLE])
    assert refused.exit_code == 2, refused.output
    assert "duplicate key 'queue'" in refused.output and "line 3" in refused.output
    as_json = tmp_path / "twice.json"
    as_json.write_text(
        '{"name": "a", "queue": "x", "queue": "y", "tasks": [{"name": "m", "resources": {}}]}'
    )
    refused = CliRunner().invoke(app, ["submit", str(as_json), "--dry-run"])
    assert refused.exit_code == 2 and "duplicate key 'queue'" in refused.output


def test_a_job_file_nested_thousands_deep_is_a_clean_error(tmp_path: Path) -> None:
    """Issue 23: 5,000 levels of YAML ended in a RecursionError traceback."""
    for name, text in (
        ("deep.yaml", "name: " + "[" * 5000 + "]" * 5000 + "\n"),
        ("deep.json", '{"name": ' + "[" * 5000 + "]" * 5000 + "}"),
    ):
        deep = tmp_path / name
        deep.write_text(text)
        refused = CliRunner().invoke(app, ["submit", str(deep), "--dry-run"])
        assert refused.exit_code == 2, refused.output
        assert "nested more than 32 levels deep" in refused.output
        assert "Traceback" not in refused.output and "RecursionError" not in refused.output
