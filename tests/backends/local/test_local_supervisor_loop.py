"""The batch supervisor's event loop (``_supervise.py``) against any replica's output (issue
35): every replica of a run starts, whatever the others do with their pipes.

A replica's command is started as another user with a plain ``fork`` (``_spawn.py``), and a
child just forked holds a copy of every pipe the supervisor has open until it closes them. The
supervisor used to close a started command's error pipe before removing it from its event
watcher: while such a copy lived, the watcher kept reporting the old pipe under its number,
which the next replica's stdout pipe then got, and the supervisor blocked reading that stdout.
A replica that waits for all the others before it writes anything (a barrier, as every
multi-rank job has) then never wrote, and the run hung: 2 of 4 runs of 1,000 replicas, 1 of 5
of 256. These run jobs as ``nobody`` (a ``fork``, not a ``vfork``), as root, with real
processes; a hang fails them through the generous limits of ``tests/timing.py``.

The barrier: each replica appends its index to ``started`` and then waits on a shared lock of
``lock`` (``flock -s``), which the test holds exclusively until every index is there: no
replica writes to its pipes, or ends, before all of them have started.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.backends import BackendRunState, RunStatus, StatusRequest
from tests.backends.local.test_local_cgroups import _bases, isolated  # noqa: F401  (the fixture)
from tests.backends.local.test_local_isolation import needs_root
from tests.backends.support import LocalHarness, request
from tests.timing import wait_until


class Barrier:
    """A directory every user may reach: ``started`` (appended to by any user) and ``lock``,
    held exclusively by the test until it ``release``\\ s the replicas."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started = directory / "started"
        self.lock = directory / "lock"
        for path in (self.started, self.lock):
            path.touch()
            path.chmod(0o666)
        self.holder: int | None = os.open(self.lock, os.O_RDONLY)  # not inherited
        fcntl.flock(self.holder, fcntl.LOCK_EX)

    def wait(self) -> str:
        """Shell: note this replica started, then wait for the release."""
        return f'echo "$FLOTILLA_REPLICA" >> {self.started}; flock -s {self.lock} true'

    def count(self) -> int:
        return len(self.started.read_text().split())

    def release(self) -> None:
        if self.holder is not None:
            os.close(self.holder)
            self.holder = None


@pytest.fixture
def barrier() -> Iterator[Barrier]:
    needs_root()
    # Not under /tmp: a job of another user has a /tmp of its own (SECURITY.md).
    directory = Path(tempfile.mkdtemp(prefix="flotilla-barrier-", dir="/var/tmp"))
    directory.chmod(0o755)
    made = Barrier(directory)
    try:
        yield made
    finally:
        made.release()
        shutil.rmtree(directory, ignore_errors=True)


def run_behind_barrier(
    local: LocalHarness,
    barrier: Barrier,
    replicas: int,
    before: str,
    after: str = "",
    **config: object,
) -> None:
    """Start ``replicas`` replicas as ``nobody`` that do ``before``, wait at the barrier, then
    do ``after``; every one must start, and the run succeed once released."""
    backend = local.make(working_dir=None, run_as="nobody", grace_period=5.0, **config)
    command = f"{before}{barrier.wait()}{after}"
    backend.dispatch(request(backend, "run-1", {"command": command}, replicas=replicas))
    wait_until(
        lambda: barrier.count() == replicas,
        lambda: f"all {replicas} replicas started (only {barrier.count()} did)",
        seconds=240.0,
        interval=0.2,
    )
    assert sorted(map(int, barrier.started.read_text().split())) == list(range(replicas))
    barrier.release()
    ended: list[RunStatus] = []

    def terminal() -> bool:
        ended[:] = [backend.status(StatusRequest("run-1"))]
        return ended[0].state.terminal

    wait_until(
        terminal,
        lambda: f"the run to end ({sum(not r.state.terminal for r in ended[0].replicas)} running)",
        seconds=240.0,
        interval=0.2,
    )
    status = ended[0]
    assert status.state is BackendRunState.SUCCEEDED, status.message


def test_a_job_of_1000_replicas_that_each_wait_for_all_others_starts_them_all(
    isolated: LocalHarness,  # noqa: F811
    barrier: Barrier,
) -> None:
    run_behind_barrier(isolated, barrier, 1000, "", "; echo done; echo done >&2")


def test_replicas_that_close_their_output_at_once_all_start_and_end(
    isolated: LocalHarness,  # noqa: F811
    barrier: Barrier,
) -> None:
    """Half the replicas close stdout and stderr before the barrier (the supervisor sees each
    pipe end while it still starts others), the rest write only after it."""
    before = "if [ $((FLOTILLA_REPLICA % 2)) = 0 ]; then exec >&- 2>&-; fi; "
    run_behind_barrier(isolated, barrier, 256, before, "; echo done 2>/dev/null || true")


def test_replicas_that_flood_their_output_all_start_and_the_log_stays_capped(
    isolated: LocalHarness,  # noqa: F811
    barrier: Barrier,
) -> None:
    """Every replica writes 4 MiB to each stream while the others start, past the run's log
    cap (read and dropped), and again after the barrier."""
    flood = "head -c 4194304 /dev/zero; head -c 4194304 /dev/zero >&2; "
    run_behind_barrier(isolated, barrier, 64, flood, f"; {flood.rstrip('; ')}", log_limit="1Mi")
    logs = sum(
        path.stat().st_size
        for path in isolated.state_dir.glob("runs/run-1/*")
        if path.suffix in (".stdout", ".stderr")
    )
    assert logs <= 2**20 + 64 * 2 * 200, f"{logs} bytes of log for a cap of 1 MiB"
