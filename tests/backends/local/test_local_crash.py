"""The ``local`` backend across a crash of its service: what a restarted backend reports.

Regression tests of issue 12 (defects 1, 2 and 4).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flotilla.backends import BackendRunState, StatusRequest
from flotilla.backends.local.backend import LocalBackend
from tests.backends.support import LocalHarness, read_all, request
from tests.timing import wait_until


def wait_for_file(path: Path) -> None:
    wait_until(path.exists, f"{path} to appear")


def test_a_repeated_dispatch_of_a_run_that_ended_reports_its_outcome_at_the_next_poll(
    local: LocalHarness,
) -> None:
    """The service died after the run was dispatched but before it recorded ``pending``;
    the run ended meanwhile. The restarted service dispatches it again (idempotent) and must
    then hear how it ended, or the job stays ``pending`` forever."""
    first = local.make()
    first.dispatch(request(first, "run-1", local.quick()))
    assert local.wait_terminal(first, "run-1").state is BackendRunState.SUCCEEDED
    local.close_leaving_runs(first)

    second = local.make()
    assert second.poll() == []  # an old finished run is not news by itself
    second.dispatch(request(second, "run-1", local.quick()))
    reported = [(status.run_id, status.state) for status in second.poll()]
    assert reported == [("run-1", BackendRunState.SUCCEEDED)]


def test_a_run_that_succeeded_while_unwatched_is_not_failed_for_its_max_runtime(
    local: LocalHarness,
) -> None:
    first = local.make()
    payload, gate = local.gated()
    first.dispatch(request(first, "run-1", payload, max_runtime=1.0))
    local.close_leaving_runs(first)
    local.release(gate)
    wait_for_file(local.state_dir / "runs" / "run-1" / "main-0.exit")
    time.sleep(1.2)  # the restart comes after the run's max_runtime has passed

    second = local.make()
    status = local.wait_terminal(second, "run-1")
    assert (status.state, status.exit_code, status.message) == (BackendRunState.SUCCEEDED, 0, "")


def test_a_relative_state_dir_still_runs_commands_in_their_working_dir(
    local: LocalHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flotilla up`` defaults to a relative state dir; a payload ``working_dir`` moves the
    command elsewhere (inside its scratch dir), and the supervisor must still find the run's
    gate file."""
    monkeypatch.chdir(local.scratch)
    backend = local.make(state_dir=Path("state"), working_dir=None)
    assert isinstance(backend, LocalBackend)
    backend.dispatch(request(backend, "run-1", {"command": ["pwd"], "working_dir": "data"}))
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.SUCCEEDED, status.message
    where = Path(read_all(backend, "run-1").strip())
    assert where.name == "data" and where.parent.name.startswith("flotilla-local-run-1-")
    assert backend.status(StatusRequest("run-1")).exit_code == 0
