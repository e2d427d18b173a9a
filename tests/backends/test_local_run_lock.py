"""Two processes sharing a local backend's state dir start each run once (issue 23, item 7).

Replicas of ``flotilla up`` on one machine share the local cluster's state dir. A leader whose
lease lapsed and its successor can dispatch the same leased run at the same moment; each
backend read the run's record from disk, found none, and started it: the command ran twice,
milliseconds apart. Here two real processes, each with its own ``LocalBackend`` over one state
dir, dispatch the same runs at the same instant; every replica's command must run once.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from flotilla.backends.interface import BackendUnavailable
from flotilla.backends.run_lock import RunLocks
from tests.timing import limit

from .support import WAIT_LIMIT

RUNS = 12
REPLICAS = 2

_DISPATCHER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from flotilla.backends import DispatchRequest, ReplicaPlacement, StatusRequest
    from flotilla.backends.local import LocalBackend

    state_dir, marks, go, runs, replicas = sys.argv[1:6]
    backend = LocalBackend(state_dir=Path(state_dir), working_dir=Path(state_dir).parent)
    node = backend.inventory().nodes[0].name
    command = ["sh", "-c", f'echo "$FLOTILLA_RUN-$FLOTILLA_REPLICA" >> {marks}']
    print("ready", flush=True)
    while not Path(go).exists():
        time.sleep(0.001)
    for index in range(int(runs)):
        backend.dispatch(
            DispatchRequest(
                run_id=f"run-{index}",
                job=f"job-{index}",
                cluster=backend.cluster,
                placements=tuple(
                    ReplicaPlacement("main", replica, node) for replica in range(int(replicas))
                ),
                payload={"command": command},
            )
        )
    while True:  # the test's wait for this process bounds it
        states = [backend.status(StatusRequest(f"run-{i}")).state for i in range(int(runs))]
        if all(state.terminal for state in states):
            break
        time.sleep(0.02)
    backend.close()
    """
)


def test_two_processes_dispatching_the_same_runs_at_once_start_each_replica_once(
    tmp_path: Path,
) -> None:
    state_dir, marks, go = tmp_path / "state", tmp_path / "marks", tmp_path / "go"
    arguments = [str(state_dir), str(marks), str(go), str(RUNS), str(REPLICAS)]
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _DISPATCHER, *arguments],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for process in processes:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
    go.touch()
    for process in processes:
        assert process.wait(timeout=limit(WAIT_LIMIT * 8)) == 0
    started = Counter(marks.read_text().split())
    expected = {f"run-{run}-{replica}": 1 for run in range(RUNS) for replica in range(REPLICAS)}
    assert dict(started) == expected


def test_a_run_lock_held_by_another_process_is_waited_for_then_given_up_for_now(
    tmp_path: Path,
) -> None:
    """A process stuck while starting a run does not block the others forever: they give up
    after the wait (the loop dispatches again next cycle) and get the lock once it is free."""
    directory = tmp_path / "runs" / "run-1"
    directory.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline().strip() == "held"
    locks = RunLocks(wait_seconds=0.2)
    began = time.monotonic()
    refused = pytest.raises(BackendUnavailable, match="run-1 is being started or adopted")
    with refused, locks.hold(directory):
        pass
    assert time.monotonic() - began >= 0.2
    holder.stdin.close()  # the holder exits: the kernel releases its lock
    holder.wait(timeout=limit(WAIT_LIMIT))
    with locks.hold(directory), locks.hold(directory):  # re-entrant within one holder
        pass


_HOLDER = (
    "import fcntl, os, sys\n"
    "descriptor = os.open(sys.argv[1], os.O_RDONLY)\n"
    "fcntl.flock(descriptor, fcntl.LOCK_EX)\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
)
