"""The supervisor's start gate (``backends/local/_supervise.py``): its command runs only once the
gate says ``go``; a backend that dies before deciding (its end of the gate pipe closes) leaves
supervisors that abandon the run instead of waiting out a timeout (issue 23: with a 30 s
timeout, the first supervisors of a long dispatch gave up and their replicas were lost)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from flotilla.backends.local import processes
from flotilla.backends.local._supervise import claim_gate
from tests.timing import limit


@pytest.mark.parametrize("decision", ["go", None])
def test_a_supervisor_runs_its_command_only_once_the_gate_says_go(
    tmp_path: Path, decision: str | None
) -> None:
    marker, gate, exit_file = tmp_path / "ran", tmp_path / "gate", tmp_path / "main-0.exit"
    gate_read, gate_write = os.pipe()
    spec = {
        "argv": ["/bin/sh", "-c", f"touch {marker}"],
        "uid": None,
        "gid": None,
        "groups": None,
        "working_dir": str(tmp_path),
        "make_working_dir": False,
        "gate_file": str(gate),
        "gate_fd": gate_read,
        "log_usage_file": str(tmp_path / "log-usage"),
        "log_limit": None,
        "replicas": [
            {
                "env": {"PATH": "/usr/bin:/bin"},
                "exit_file": str(exit_file),
                "stdout": str(tmp_path / "main-0.stdout"),
                "stderr": str(tmp_path / "main-0.stderr"),
                "cgroups": [],
            }
        ],
    }
    try:
        supervisor = processes.start_supervised(
            spec, stdout=tmp_path / "out", stderr=tmp_path / "err", gate_fd=gate_read
        )
    finally:
        os.close(gate_read)
    if decision is not None:
        claim_gate(str(gate), decision)
    os.close(gate_write)  # the backend decided, or died without deciding
    assert supervisor.wait(timeout=limit(60)) == 0, (tmp_path / "err").read_text()
    outcome = json.loads(exit_file.read_text())
    if decision == "go":
        assert outcome["exit_code"] == 0 and marker.exists()
    else:
        assert outcome == {"exit_code": None, "abandoned": True} and not marker.exists()
        assert gate.read_text() == "abandon"
