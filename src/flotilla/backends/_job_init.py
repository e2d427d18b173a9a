"""The init of a replica's own PID namespace, and how it joins its cgroups (standard library
only: the supervisor, ``_supervise.py``, imports it by path before anything else).

``run(start, cgroups, namespace)`` forks a child that joins the replica's cgroups (every
process it starts is then in them: a process can leave its session, never its cgroup) and,
with ``namespace``, is PID 1 of a new PID namespace. That child starts the command and waits
for it, reaping the orphans re-parented to it meanwhile; when the command ends it exits, and
the kernel kills every process left in the namespace — ``setsid`` daemons included. A cancel
or a limit's SIGKILL to the replica's process group kills it too, with the same effect.

Why an init of our own rather than the command as PID 1: the kernel delivers to a namespace's
init only the signals it has a handler for (SIGKILL aside), so a plain ``sleep`` as PID 1
would shrug off the backend's SIGTERM. The command here is PID 2 and gets signals as always.
The init protects itself from the OOM killer (``oom_score_adj`` -1000), so an OOM kill in the
replica's memory cgroup takes the command, whose outcome the init then reports.

The outcome travels to the supervisor through a pipe as JSON (``{"exit_code": -9}``, or with
``error`` when the command could not start); a killed init writes nothing and the supervisor
takes its wait status instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

CLONE_NEWPID = 0x20000000


def new_pid_namespace() -> bool:
    """Make the next child of this process PID 1 of a new namespace; False where the kernel
    refuses (no privilege, no namespaces)."""
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.unshare(CLONE_NEWPID) == 0)


def _join(cgroups: Sequence[str]) -> None:
    for directory in cgroups:
        with open(os.path.join(directory, "cgroup.procs"), "w", encoding="ascii") as file:
            file.write("0")  # this process; its children follow it


def _protect_from_oom() -> None:
    try:
        with open("/proc/self/oom_score_adj", "w", encoding="ascii") as file:
            file.write("-1000")
    except OSError:
        pass  # not root: the OOM killer still prefers the larger command


def _report(descriptor: int, outcome: dict[str, Any]) -> None:
    data = json.dumps(outcome).encode()
    while data:
        data = data[os.write(descriptor, data) :]
    os.close(descriptor)


STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def _init(start: Callable[[], Any], name: str, cgroups: Sequence[str], descriptor: int) -> int:
    """The child: join, start, wait, report. Returns its exit status.

    A stop signal (the backend's SIGTERM to the replica's group) that comes before the
    command exists would reach no command: it is passed on once the command has started.
    (``run`` blocks them across the fork, so none is lost before these handlers are set.)"""
    early: list[int] = []
    for number in STOPS:
        signal.signal(number, lambda number, _: early.append(number))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
    try:
        _join(cgroups)
    except OSError as error:
        _report(descriptor, {"exit_code": 127, "error": f"could not join its cgroup: {error}"})
        return 127
    try:
        command = start()
    except Exception as error:
        refusal = getattr(error, "refusal", None) or f"could not start {name!r}: {error}"
        _report(descriptor, {"exit_code": 127, "error": refusal})
        return 127
    _protect_from_oom()  # after the start: the command keeps the default score
    for early_signal in dict.fromkeys(early):
        with contextlib.suppress(ProcessLookupError):
            os.kill(command.pid, early_signal)
    while True:
        try:
            pid, status = os.wait()  # reaps orphans too: this may be their init
        except ChildProcessError:  # pragma: no cover - the command is a child until reaped
            return 127
        if pid == command.pid:
            break
    code = os.waitstatus_to_exitcode(status)
    _report(descriptor, {"exit_code": code})
    return code if code >= 0 else 128 - code


def spawn(
    start: Callable[[], Any], name: str, cgroups: Sequence[str], namespace: bool
) -> tuple[int, int] | dict[str, Any]:
    """Fork the replica's init, which runs the command ``start`` starts (a ``Popen``; an
    exception it raises is the outcome, its ``refusal`` attribute the message when it has
    one; ``name`` is its program, for that message) in ``cgroups`` and, with ``namespace``,
    its own PID namespace. Returns the init's pid and the read end of its outcome pipe (for
    ``finish``), or the outcome itself when the init could not be forked. Call from a
    single-threaded process."""
    if namespace and not new_pid_namespace():
        namespace = False  # the backend probed it; a refusal now runs without, as before
    reading, writing = os.pipe()
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        child = os.fork()
    except OSError as error:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        os.close(reading)
        os.close(writing)
        return {"exit_code": 127, "error": f"could not start {name!r}: {error}"}
    if child == 0:  # pragma: no cover - runs in the child, which coverage does not follow
        os.close(reading)
        code = 127
        try:
            code = _init(start, name, cgroups, writing)
        finally:
            os._exit(code & 0xFF)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
    os.close(writing)
    return child, reading


def finish(reading: int, status: int) -> dict[str, Any]:
    """The outcome the init reported on ``reading`` (closed here), once it has exited with
    wait ``status``; the status itself when the init was killed before reporting."""
    chunks = []
    while chunk := os.read(reading, 65536):
        chunks.append(chunk)
    os.close(reading)
    if chunks:
        outcome: dict[str, Any] = json.loads(b"".join(chunks))
        return outcome
    return {"exit_code": os.waitstatus_to_exitcode(status)}  # the init itself was killed


def run(
    start: Callable[[], Any], name: str, cgroups: Sequence[str], namespace: bool
) -> dict[str, Any]:
    """``spawn`` then wait for the init and ``finish``: the command's outcome as the
    supervisor writes it down."""
    started = spawn(start, name, cgroups, namespace)
    if isinstance(started, dict):
        return started
    child, reading = started
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
    return finish(reading, status)
