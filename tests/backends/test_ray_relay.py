"""The Ray driver's relay (issue 28), without Ray: a job whose ``preemption.signal`` Ray's
``stop_job`` cannot send (SIGUSR1) gets it when Ray stops the job, may save its work within
its grace, and is killed after it. Ray's stop is played as Ray 2.60 does it: SIGTERM to the
driver and every process under it (here: the driver's process group, which the relay keeps
its job in), from a driver started in a session of its own."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flotilla.backends.ray.relay import relay_command
from tests.timing import deadline, limit, wait_until

LIMIT = 30.0


@pytest.fixture
def start() -> Iterator[Callable[..., Any]]:
    """Start the relay as Ray's driver (``exec``: the shell Ray starts is the relay, so the
    test reads the relay's own exit code). Each driver's group (the relay keeps its job in
    it) is killed at the end, so a failing test leaves no job behind."""
    drivers: list[subprocess.Popen[bytes]] = []

    def relay(
        command: str, signal_name: str, grace: float, max_runtime: float | None = None
    ) -> subprocess.Popen[bytes]:
        entrypoint = relay_command(command, signal_name, grace, max_runtime, deadline_grace=grace)
        driver = subprocess.Popen(f"exec {entrypoint}", shell=True, start_new_session=True)
        drivers.append(driver)
        return driver

    yield relay
    for driver in drivers:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()


def await_file(path: Path) -> str:
    wait_until(lambda: path.exists() and bool(path.read_text()), f"{path} to be written", LIMIT)
    return path.read_text()


def gone(pid: int) -> bool:
    """Whether ``pid`` ended (within a few seconds: a killed process is a zombie until its
    new parent reaps it, and a zombie runs nothing)."""
    due = deadline(5.0)
    while not due.expired():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return True
        time.sleep(0.05)
    return False


def saver(tmp_path: Path, on_signal: str) -> str:
    """A job that writes its pid to ``ready``, and on SIGUSR1 writes ``saved`` then
    ``on_signal`` (``exit`` or ``stay``: ignore the stop and go on)."""
    script = f"""
import os, signal, sys, time
from pathlib import Path
from typing import Any
def save(*_):
    Path({str(tmp_path / "saved")!r}).write_text("saved")
    if {on_signal!r} == "exit":
        sys.exit(0)
signal.signal(signal.SIGUSR1, save)
Path({str(tmp_path / "ready")!r}).write_text(str(os.getpid()))
while True:
    time.sleep(0.05)
"""
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(script)}"


def test_rays_sigterm_becomes_the_jobs_signal_and_the_kill_comes_after_the_grace(
    tmp_path: Path, start: Callable[..., Any]
) -> None:
    driver = start(saver(tmp_path, "stay"), "SIGUSR1", grace=1.0)
    job = int(await_file(tmp_path / "ready"))
    os.killpg(driver.pid, signal.SIGTERM)  # Ray's stop_job: SIGTERM to every process
    assert await_file(tmp_path / "saved") == "saved"  # the job outlived SIGTERM and saved
    driver.wait(timeout=limit(LIMIT))
    assert gone(job)  # ignored its signal: killed once the grace was over


def test_a_job_that_saves_and_exits_within_its_grace_ends_then(
    tmp_path: Path, start: Callable[..., Any]
) -> None:
    driver = start(saver(tmp_path, "exit"), "SIGUSR1", grace=60.0)
    job = int(await_file(tmp_path / "ready"))
    started = time.monotonic()
    os.killpg(driver.pid, signal.SIGTERM)
    driver.wait(timeout=limit(LIMIT))  # (Ray reports a stopped job STOPPED whatever its code)
    assert time.monotonic() - started < 60  # its own end, long before the 60 s grace
    assert (tmp_path / "saved").read_text() == "saved"
    assert gone(job)


def test_max_runtime_sends_the_jobs_signal_and_reports_timeouts_code(
    tmp_path: Path, start: Callable[..., Any]
) -> None:
    """In place of ``timeout`` (which would pass Ray's SIGTERM on): the job's signal at the
    deadline, 124 when it ended within the grace, 137 when it had to be killed."""
    saved = start(saver(tmp_path, "exit"), "SIGUSR1", grace=30.0, max_runtime=0.5)
    assert saved.wait(timeout=limit(LIMIT)) == 124
    assert (tmp_path / "saved").read_text() == "saved"
    stubborn = start("trap '' USR1; sleep 60", "SIGUSR1", grace=0.2, max_runtime=0.3)
    assert stubborn.wait(timeout=limit(LIMIT)) == 137


def test_a_job_that_ends_by_itself_reports_its_own_code(
    tmp_path: Path, start: Callable[..., Any]
) -> None:
    assert start("exit 3", "SIGUSR1", grace=1.0).wait(timeout=limit(LIMIT)) == 3
