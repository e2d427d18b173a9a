"""A job's reported checkpoint on the local backend (issue 28): every replica gets
``FLOTILLA_CHECKPOINT_FILE`` in the run's own scratch dir; ``flotilla.checkpoint()`` touches
it, and the backend's poll reports the time as ``last_checkpoint_at``."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

from flotilla.backends import Backend, RunStatus, StatusRequest
from tests.backends.support import LocalHarness, read_all, request
from tests.timing import deadline

SAVE = """
import os, time
import flotilla
print(os.environ["FLOTILLA_CHECKPOINT_FILE"], flush=True)
print("before", flush=True)
while not os.path.exists(os.environ["GO"]):
    time.sleep(0.02)
assert flotilla.checkpoint()
print("saved", flush=True)
time.sleep(60)
"""


def polled_until_checkpoint(local: LocalHarness, backend: Backend, run_id: str) -> RunStatus:
    due = deadline(local.wait_limit)
    while True:
        for status in backend.poll():
            if status.run_id == run_id and status.last_checkpoint_at is not None:
                return status
        if due.expired():
            raise AssertionError(f"run {run_id} never reported a checkpoint")
        local.pass_time()


def test_a_checkpoint_the_job_reports_reaches_the_poll(local: LocalHarness) -> None:
    backend = local.make(working_dir=None)  # each run in its own scratch dir
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(SAVE)}"
    go = local.state_dir / "go"
    backend.dispatch(request(backend, "trainer", {"command": command}, env={"GO": str(go)}))
    local.wait_output(backend, "trainer", "before")
    assert backend.status(StatusRequest("trainer")).last_checkpoint_at is None
    named = Path(read_all(backend, "trainer").splitlines()[0])
    assert named.parent.name.startswith("flotilla-") and "-trainer-" in named.parent.name
    go.touch()
    status = polled_until_checkpoint(local, backend, "trainer")
    assert status.state.value == "running"
    assert status.started_at is not None and status.last_checkpoint_at is not None
    assert status.started_at <= status.last_checkpoint_at <= time.time()
    assert "saved" in read_all(backend, "trainer")
