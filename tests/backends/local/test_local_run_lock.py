"""Two processes sharing a local backend's state dir start each run once (issue 23, item 7).

Replicas of ``flotilla up`` on one machine share the local cluster's state dir. A leader whose
lease lapsed and its successor can dispatch the same leased run at the same moment; each
backend read the run's record from disk, found none, and started it: the command ran twice,
milliseconds apart. Here two real processes, each with its own ``LocalBackend`` over one state
dir, dispatch the same runs at the same instant; every replica's command must run once.

A run whose lock another process holds is skipped, not waited for: a leader stopped
(SIGSTOP) while it starts a run held a standby's first cycle, and its backend, for 30 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from flotilla.backends import Backend, BackendRunState, StatusRequest
from flotilla.backends.interface import RunBusy
from flotilla.backends.local.run_lock import RunLocks
from tests.backends.support import WAIT_LIMIT, LocalHarness, request
from tests.e2e.service import kill_leftover_runs
from tests.timing import limit

RUNS = 12
REPLICAS = 2

_DISPATCHER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from flotilla.backends import DispatchRequest, ReplicaPlacement, RunBusy, StatusRequest
    from flotilla.backends.local.backend import LocalBackend

    state_dir, marks, go, runs, replicas = sys.argv[1:6]
    backend = LocalBackend(state_dir=Path(state_dir), working_dir=Path(state_dir).parent)
    node = backend.inventory().nodes[0].name
    command = ["sh", "-c", f'echo "$FLOTILLA_RUN-$FLOTILLA_REPLICA" >> {marks}']
    print("ready", flush=True)
    while not Path(go).exists():
        time.sleep(0.001)
    waiting = set(range(int(runs)))
    while waiting:  # as the loop does: a run the other process holds is dispatched next cycle
        for index in sorted(waiting):
            try:
                backend.dispatch(
                    DispatchRequest(
                        run_id=f"run-{index}",
                        job=f"job-{index}",
                        cluster=backend.cluster,
                        placements=tuple(
                            ReplicaPlacement("main", replica, node)
                            for replica in range(int(replicas))
                        ),
                        payload={"command": command},
                    )
                )
            except RunBusy:
                continue
            waiting.discard(index)
        time.sleep(0.01)
    while True:  # the test's wait for this process bounds it
        try:
            states = [backend.status(StatusRequest(f"run-{i}")).state for i in range(int(runs))]
        except RunBusy:
            continue
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
    try:
        for process in processes:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
        go.touch()
        for process in processes:
            assert process.wait(timeout=limit(WAIT_LIMIT * 8)) == 0
    finally:  # a hang or a failure leaves neither dispatcher nor any of its runs behind
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        kill_leftover_runs(state_dir)
    started = Counter(marks.read_text().split())
    expected = {f"run-{run}-{replica}": 1 for run in range(RUNS) for replica in range(REPLICAS)}
    assert dict(started) == expected


def test_a_run_lock_held_by_another_process_is_not_waited_for(tmp_path: Path) -> None:
    """A process stuck while starting a run blocks no one: the lock is tried, and refused at
    once while it is held (the loop dispatches again next cycle); free, it is taken."""
    directory = tmp_path / "runs" / "run-1"
    directory.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "held"
        locks = RunLocks()
        with (
            pytest.raises(RunBusy, match="run-1 is being started or adopted"),
            locks.hold(directory),
        ):
            pass
        holder.stdin.close()  # the holder exits: the kernel releases its lock
        holder.wait(timeout=limit(WAIT_LIMIT))
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    with locks.hold(directory), locks.hold(directory):  # re-entrant within one holder
        pass


_HOLDER = (
    "import fcntl, os, sys\n"
    "descriptor = os.open(sys.argv[1], os.O_RDONLY)\n"
    "fcntl.flock(descriptor, fcntl.LOCK_EX)\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
)


_STOPPED_LEADER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from flotilla.backends import DispatchRequest, ReplicaPlacement
    from flotilla.backends.local import starting as local_starting
    from flotilla.backends.local.backend import LocalBackend

    state_dir, working_dir, marks = sys.argv[1:4]
    real_claim = local_starting.claim_gate

    def stopped_at_the_gate(path, decision):
        # Every supervisor is on record, the run's lock held: the leader stops right here.
        # raise(): this very thread takes the stop before going on (kill() to the process
        # may have another thread take it while this one runs on into the gate).
        print("stopping", flush=True)
        signal.raise_signal(signal.SIGSTOP)
        return real_claim(path, decision)

    local_starting.claim_gate = stopped_at_the_gate
    backend = LocalBackend(state_dir=Path(state_dir), working_dir=Path(working_dir))
    node = backend.inventory().nodes[0].name
    backend.dispatch(
        DispatchRequest(
            run_id="stuck",
            job="job-stuck",
            cluster=backend.cluster,
            placements=tuple(ReplicaPlacement("main", index, node) for index in range(2)),
            payload={"command": ["sh", "-c", f'echo "$FLOTILLA_REPLICA" >> {marks}']},
        )
    )
    sys.stdin.read()  # until the test lets it go; its runs are left to the other backend
    """
)


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state ``T`` in its ``/proc`` stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] == "T"


def _within_the_wait_limit(work: Callable[[], None]) -> None:
    """Run ``work`` on a thread; it must end within ``WAIT_LIMIT`` (the run lock it meets
    used to be waited for 30 s, more than once)."""
    failure: list[BaseException] = []

    def attempt() -> None:
        try:
            work()
        except BaseException as error:  # re-raised on the test's thread
            failure.append(error)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    # Stretched by the machine's slowdown, but below the 30 s the lock was once waited for.
    thread.join(min(limit(WAIT_LIMIT), 25.0))
    assert not thread.is_alive(), "held up by the run lock of a stopped process"
    if failure:
        raise failure[0]


def test_a_leader_stopped_while_starting_a_run_holds_up_nothing_else_and_runs_it_once(
    local: LocalHarness,
) -> None:
    """A leader stopped (SIGSTOP) with a run half-started, its lock held: a backend over the
    same state dir (the standby that takes over) starts, skips that run when asked to
    dispatch or report it (``RunBusy``, asked again next cycle), and dispatches and runs
    another one meanwhile. Once the leader goes on, the stuck run's replicas run once each."""
    marks = local.scratch / "marks"
    leader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _STOPPED_LEADER,
            str(local.state_dir),
            str(local.scratch),
            str(marks),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert leader.stdout is not None and leader.stdin is not None
    try:
        assert leader.stdout.readline().strip() == "stopping"
        deadline = time.monotonic() + limit(WAIT_LIMIT)
        while not _stopped(leader.pid):
            assert time.monotonic() < deadline, "the leader never stopped"
            time.sleep(0.01)

        made: list[Backend] = []
        _within_the_wait_limit(lambda: made.append(local.make()))
        standby = made[0]
        stuck = request(standby, "stuck", {"command": ["true"]}, job="job-stuck", replicas=2)

        def dispatch_around_the_stuck_run() -> None:
            with pytest.raises(RunBusy):
                standby.dispatch(stuck)
            with pytest.raises(RunBusy):
                standby.status(StatusRequest("stuck"))
            standby.dispatch(request(standby, "other", local.quick("other")))

        _within_the_wait_limit(dispatch_around_the_stuck_run)
        other = local.wait_terminal(standby, "other")
        assert other.state is BackendRunState.SUCCEEDED
        assert _stopped(leader.pid)  # all of that while the leader held the run
        assert not marks.exists()  # and its run started nowhere

        os.kill(leader.pid, signal.SIGCONT)  # the leader goes on: it opens the run's gate
        deadline = time.monotonic() + limit(WAIT_LIMIT)
        while True:  # the standby's next cycles: the run is the leader's, adopted once free
            try:
                standby.dispatch(stuck)  # a repeat: nothing more is started
                break
            except RunBusy:
                assert time.monotonic() < deadline, "the run's lock was never given back"
                time.sleep(0.02)
        done = local.wait_terminal(standby, "stuck")
        assert done.state is BackendRunState.SUCCEEDED
        assert sorted(marks.read_text().split()) == ["0", "1"]  # each replica once
    finally:
        with_leader_gone(leader)


def with_leader_gone(leader: subprocess.Popen[str]) -> None:
    """End the leader process (continued first, so it can exit)."""
    if leader.poll() is None:
        os.kill(leader.pid, signal.SIGCONT)
        assert leader.stdin is not None
        leader.stdin.close()
        try:
            leader.wait(timeout=limit(WAIT_LIMIT))
        except subprocess.TimeoutExpired:
            leader.kill()
            leader.wait()
