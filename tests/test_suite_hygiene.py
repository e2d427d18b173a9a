"""The suite leaves nothing behind (issue 41): a test that fails before it ends the processes
it started does not leave them running once the session is over (``tests/conftest.py``,
``pytest_sessionfinish``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LEAKY = textwrap.dedent(
    """
    import subprocess, sys

    def test_that_fails_with_a_process_running():
        sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)
        with open(PIDFILE, "w") as out:
            out.write(str(sleeper.pid))
        assert False, "failed before its clean-up"
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_failed_tests_processes_do_not_outlive_the_session(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    test_file = tmp_path / "test_leaky.py"
    test_file.write_text(f"PIDFILE = {str(pidfile)!r}\n" + LEAKY)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(test_file),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    pid = int(pidfile.read_text())
    try:
        assert not _alive(pid), "the failed test's process outlived the session"
        assert "killed 1 process(es) tests left behind" in result.stderr
    finally:
        if _alive(pid):
            os.kill(pid, 9)


TWO_FAILURES = textwrap.dedent(
    """
    import pytest

    @pytest.mark.timing
    def test_paced_against_a_service():
        assert False, "fell behind on a loaded machine"

    def test_plain_logic():
        assert False, "a real bug"
    """
)


def test_the_closing_line_tells_timing_sensitive_failures_from_the_rest(tmp_path: Path) -> None:
    """A newcomer on a busy machine can tell "my machine is busy" from "main is broken"
    (issue 37 item 7): the last line counts the failures of tests marked ``timing`` apart."""
    test_file = tmp_path / "test_two.py"
    test_file.write_text(TWO_FAILURES)
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest"),
            *("-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(test_file)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-2].startswith(
        "2 failed: 1 not timing-sensitive (look at these first), 1 timing-sensitive"
    ), result.stdout
    assert "./scripts/test -m timing" in lines[-2]
