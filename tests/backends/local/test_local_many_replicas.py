"""Many replicas on the ``local`` backend (issue 23: ``replicas: 10000`` stalled everyone).

A run's replicas are started by one supervisor per batch of ``local_starting.BATCH`` (one for
a run of 500), which forks their commands from itself: not an interpreter per replica, which
made 10,000 replicas take minutes and not fit in memory. Every replica still runs, and a cancel
still ends every one of them. The figures are ``bench/local_replicas.py``'s
(``docs/performance.md``); this test asserts the shape, not a time."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from flotilla.backends import BackendRunState, CancelRequest
from flotilla.backends.local import processes
from flotilla.backends.local import starting as local_starting
from flotilla.backends.local.starting import BATCH
from tests.backends.support import LocalHarness, request
from tests.timing import limit

REPLICAS = 500


def supervisors_below(parent: int) -> list[int]:
    """The supervisors (``_supervise.py``) that are children of ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"_supervise.py" in cmdline:
            found.append(int(entry.name))
    return found


def test_a_run_of_500_replicas_starts_under_one_supervisor_and_a_cancel_ends_them_all(
    local: LocalHarness,
) -> None:
    assert REPLICAS <= BATCH
    backend = local.make(grace_period=5.0)
    started = local.scratch / "started"
    started.mkdir()
    command = f'touch {started}/"$FLOTILLA_REPLICA"; exec sleep 600'
    backend.dispatch(request(backend, "many", {"command": command}, replicas=REPLICAS))

    running = local.wait(
        backend,
        "many",
        lambda s: (
            len(list(started.iterdir())) == REPLICAS
            and all(replica.process_id for replica in s.replicas)
        ),
        f"all {REPLICAS} replicas started",
    )
    assert running.state is BackendRunState.RUNNING
    assert sorted(int(path.name) for path in started.iterdir()) == list(range(REPLICAS))
    # One supervisor for the run (it was one per replica: 500 interpreters).
    assert len(supervisors_below(os.getpid())) == 1
    assert len({replica.process_id for replica in running.replicas}) == REPLICAS

    backend.cancel(CancelRequest("many", reason="enough"))
    status = local.wait_terminal(backend, "many")
    assert status.state is BackendRunState.CANCELLED
    assert [replica.state for replica in status.replicas] == [BackendRunState.CANCELLED] * REPLICAS
    local.assert_gone(status)


def test_a_cancel_while_a_runs_supervisors_start_ends_the_replicas_not_started_at_once(
    local: LocalHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large start takes a supervisor per batch of replicas. A cancel that comes once the
    first is up and before the others: none of the run's commands ever starts (the ones whose
    supervisor started after the cancel never got its SIGTERM), and the run ends cancelled
    without waiting out its grace period. Batches of one replica here, so a run of 4 has 4
    supervisors; the second one's start waits for the test's cancel."""
    monkeypatch.setattr(local_starting, "batch_size", lambda: 1)
    first_up, cancelled = threading.Event(), threading.Event()
    starts: list[int] = []
    real_start = processes.start_supervised

    def start_supervised(spec: Any, **kwargs: Any) -> Any:
        starts.append(len(starts))
        if len(starts) == 2:  # the second supervisor: after the test's cancel
            first_up.set()
            assert cancelled.wait(limit(30)), "the test never cancelled"
        return real_start(spec, **kwargs)

    monkeypatch.setattr(processes, "start_supervised", start_supervised)
    backend = local.make(grace_period=60.0)  # far beyond the wait for the run's end
    started = local.scratch / "started"
    started.mkdir()
    command = f'touch {started}/"$FLOTILLA_REPLICA"; exec sleep 600'
    backend.dispatch(request(backend, "large", {"command": command}, replicas=4))
    assert first_up.wait(limit(30)), "the run's start never reached its second supervisor"
    try:
        backend.cancel(CancelRequest("large", reason="not now"))
    finally:
        cancelled.set()
    status = local.wait_terminal(backend, "large")
    assert status.state is BackendRunState.CANCELLED, status
    assert len(starts) == 4
    assert sorted(path.name for path in started.iterdir()) == [], "a command started"
    assert all(replica.state.terminal for replica in status.replicas), status.replicas
    local.assert_gone(status)
