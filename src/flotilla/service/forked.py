"""One scheduling round in a child process, so that it cannot starve the API and the loop.

The algorithm is pure Python: run on a thread of the service's process it holds the GIL, and
every step of a cancel (the API's request, the loop's wake, the backend's signal, the commit)
must wait for it to let go. On a loaded machine the holder is itself waiting for a CPU, so
each hand-over costs a time slice, and a cancel has dozens of them (measured in
``docs/performance.md``). In its own process the round competes for a CPU only, which the
kernel gives first to the threads that were sleeping: the API and the loop.

``ForkedRound`` wraps the algorithm's ``schedule`` for ``AsyncSchedulingRunner``. Each round
forks the process: the child has the snapshot already (copy on write; nothing is serialised
on the way in), runs the algorithm with the garbage collector off (a collection would touch,
and so copy, every page), writes the pickled ``CycleResult`` to a pipe and exits. The
parent's runner thread waits on the pipe without holding the GIL. The child touches nothing
but the snapshot: it closes every inherited file descriptor first (database connections,
the listening socket, run logs), never returns into the parent's code, and the kernel kills
it if the thread that forked it dies (``PR_SET_PDEATHSIG``), so a ``kill -9`` of the service
leaves no round behind. A round is cancelled by killing the child.

The child's changes to the algorithm's caches (shapes that fit nowhere, node indexes) stay in
the child: each round starts from the parent's caches, which costs the round some speed, not
correctness (the caches are keyed by content).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import pickle
import select
import signal
import threading
from collections.abc import Callable
from dataclasses import replace

from flotilla.framework.snapshot import CycleResult, SchedulingSnapshot
from flotilla.scheduler.runner import RoundCancelled, ScheduleFunction

PR_SET_PDEATHSIG = 1
CANCEL_CHECK_SECONDS = 0.05
"""How often the waiting parent checks whether the round was cancelled."""


CHILD_NICENESS = 10
"""The round is background work: on a busy machine the kernel gives a CPU to the API and the
loop first, and the round takes what is left."""


class ForkedRoundFailed(RuntimeError):
    """The child died without a result (killed, out of memory); the message says how."""


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when the thread that forked it ends."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _transportable(result: CycleResult) -> CycleResult:
    """The result with its pending reasons as a plain dict (a ``PendingReasons`` refers to the
    snapshot's whole backlog, which the parent has and need not receive)."""
    return replace(result, pending=dict(result.pending))


class ForkedRound:
    """A ``ScheduleFunction`` that runs ``schedule`` in a forked child process."""

    def __init__(self, schedule: ScheduleFunction) -> None:
        self._schedule = schedule

    def __call__(self, snapshot: SchedulingSnapshot, cancel: threading.Event) -> CycleResult:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read_end)
            self._child(snapshot, write_end)
        os.close(write_end)
        try:
            data = _read_all(read_end, cancel, lambda: _kill(pid))
        finally:
            os.close(read_end)
            _reap(pid)
        if not data:
            raise ForkedRoundFailed("the scheduling round's process ended without a result")
        outcome = pickle.loads(data)
        if isinstance(outcome, BaseException):
            raise outcome
        result: CycleResult = outcome
        return result

    def _child(self, snapshot: SchedulingSnapshot, write_end: int) -> None:
        code = 0
        try:
            gc.disable()
            _die_with_parent()
            with contextlib.suppress(OSError):
                os.nice(CHILD_NICENESS)
            os.closerange(3, write_end)
            os.closerange(write_end + 1, _max_descriptors())
            try:
                outcome: object = _transportable(self._schedule(snapshot, threading.Event()))
            except BaseException as error:  # handed to the parent, raised there
                outcome = error
            try:
                data = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as error:  # an unpicklable error: its text is enough
                data = pickle.dumps(ForkedRoundFailed(f"{type(error).__name__}: {error}"))
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view) :]
        except BaseException:
            code = 1
        finally:
            os._exit(code)


def _max_descriptors() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 65536


def _read_all(descriptor: int, cancel: threading.Event, kill: Callable[[], None]) -> bytes:
    """Everything the child writes, until it closes the pipe; ``RoundCancelled`` (after killing
    the child) once ``cancel`` is set."""
    chunks: list[bytes] = []
    while True:
        if cancel.is_set():
            kill()
            raise RoundCancelled
        ready, _, _ = select.select([descriptor], [], [], CANCEL_CHECK_SECONDS)
        if not ready:
            continue
        chunk = os.read(descriptor, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
