"""One lock per run between every process sharing a local backend's state dir.

Replicas of a scheduler on one machine share the local cluster's state dir, and each one's
``LocalBackend`` reads the runs another started from it (adoption). Reading a run's record
and starting it were a check-then-act: a leader whose lease had lapsed and its successor
could both find no record of run R, and both start it (seen twice in 21 trials, 10 ms
apart). Each start and each adoption of a run now holds an exclusive ``flock`` on the run's
directory, so one process starts the run and every other one finds its complete record.

``flock`` is released by the kernel when its holder dies, so a ``kill -9`` mid-start leaves
no stale lock: the next process takes it and finds what the dead one left (a run whose start
gate it then settles, ``_supervise.py``). A holder that is alive but does not go on (a leader
stopped with SIGSTOP, or off the CPU, while it starts a run) is not waited for: the lock is
tried, and a run held elsewhere raises ``RunBusy`` at once, so a dispatch, an adoption or a
standby's first cycle skips that run and goes on with the others (issue 23: each such run
used to hold the whole cycle, and the backend's own lock, for 30 s). The run is asked about
again next cycle; it is still started by one process only.

Locks are per open file description, so two backend objects in one process exclude each other
as two processes do; a backend holding a run's lock may take it again (nested adoption within
a start).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from flotilla.backends.interface import RunBusy

WAIT_SECONDS = 0.0
"""How long to wait for another process to finish starting or adopting a run before giving
up for now (the caller retries: a dispatch is repeated next cycle). None: a start of 10,000
replicas holds its run's lock for its whole start, and a holder may be stopped; a caller
waiting would hold up everything behind it."""

_POLL_SECONDS = 0.002


class RunLocks:
    """The run locks one backend object holds (re-entrant within it)."""

    def __init__(self, wait_seconds: float = WAIT_SECONDS) -> None:
        self._wait = wait_seconds
        self._held: dict[Path, tuple[int, int]] = {}
        """Locked run directory → how many nested ``take`` calls hold it, and its descriptor.
        Used under the backend's lock."""

    @contextlib.contextmanager
    def hold(self, directory: Path) -> Iterator[None]:
        """Hold ``directory``'s lock for the block, creating the directory if needed.

        Raises ``RunBusy`` (a ``BackendUnavailable``) when another process holds it for
        ``wait_seconds`` (by default: holds it now)."""
        self.take(directory)
        try:
            yield
        finally:
            self.release(directory)

    def take(self, directory: Path) -> None:
        """Take ``directory``'s lock until ``release`` (which another thread may call: a run
        started in the background holds it until its gate is open). As ``hold``."""
        if directory in self._held:
            count, descriptor = self._held[directory]
            self._held[directory] = (count + 1, descriptor)
            return
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # the state is the server's only
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _lock(descriptor, directory, self._wait)
        except BaseException:
            os.close(descriptor)
            raise
        self._held[directory] = (1, descriptor)

    def release(self, directory: Path) -> None:
        """Give back one ``take`` of ``directory``'s lock (the last one unlocks it)."""
        count, descriptor = self._held[directory]
        if count > 1:
            self._held[directory] = (count - 1, descriptor)
            return
        del self._held[directory]
        os.close(descriptor)  # releases the lock


def _lock(descriptor: int, directory: Path, wait: float) -> None:
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise RunBusy(
                    f"run {directory.name} is being started or adopted by another process"
                ) from None
            time.sleep(_POLL_SECONDS)
