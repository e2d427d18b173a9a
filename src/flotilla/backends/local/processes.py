"""Process groups on this machine: start a supervised replica, signal it, tell if it is alive.

Linux-first: identity and liveness come from ``/proc`` (a pid alone can be reused; a pid plus
its start time cannot), with ``kill(pid, 0)`` as the fallback elsewhere.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from flotilla.backends.interface import signal_words

SUPERVISOR = Path(__file__).with_name("_supervise.py")

_PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/PID/stat`` from the state on (field 3), or ``None`` if gone."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (``None``: gone or no /proc)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


_SIGKILL_BIT = 1 << (signal.SIGKILL - 1)

_PF_EXITING = 0x4
"""The kernel's flag (``/proc/PID/stat`` field 9) of a process in its exit path."""


def _doomed(pid: int, fields: list[str]) -> bool:
    """True when ``pid`` never runs its own code again: it is exiting, or has a SIGKILL
    pending (a fatal signal shows as one), so the kernel ends it the next time it is
    scheduled, which on a loaded machine can take milliseconds. Both, as the kernel clears
    the pending bit when it takes the signal, before the process becomes a zombie: checking
    the bit alone let a process in its exit path count as alive again."""
    if int(fields[6]) & _PF_EXITING:
        return True
    try:
        text = (_PROC / str(pid) / "status").read_text()
    except OSError:
        return True  # gone meanwhile
    for line in text.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & _SIGKILL_BIT:
            return True
    return False


def process_alive(pid: int, ticks: int | None) -> bool:
    """True when ``pid`` is still the process that was started (not a zombie, not reused)
    and can still run (no SIGKILL pending: as ``group_alive`` counts it)."""
    if _PROC.is_dir():
        fields = _stat_fields(pid)
        if fields is None or fields[0] in ("Z", "X"):
            return False
        if ticks is not None and int(fields[19]) != ticks:
            return False
        return not _doomed(pid, fields)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_alive(group: int) -> bool:
    """True while any process is left in process group ``group`` that can still run: not a
    zombie, not one a SIGKILL is about to end."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not _PROC.is_dir():
        return True
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None or int(fields[2]) != group or fields[0] in ("Z", "X"):
            continue
        if not _doomed(int(entry.name), fields):
            return True
    return False


_EXIT_CODE_FIELD = 49
"""Index of ``exit_code`` (field 52 of ``/proc/PID/stat``, Linux ≥ 3.5) in ``_stat_fields``."""


def command_ended(supervisor: int) -> tuple[bool, int | None] | None:
    """Whether the command under ``supervisor`` has exited, without waiting for the supervisor
    to notice: every child it has is a zombie or already reaped (none: it has not started one,
    or reaped it). With the first zombie's exit status as a ``Popen`` return code (Linux keeps
    it in ``/proc/PID/stat`` until the reap), else ``None``. ``None`` instead of a pair: this
    system keeps no list of a process's children (no ``/proc``), or the supervisor is gone."""
    try:
        children = (_PROC / str(supervisor) / "task" / str(supervisor) / "children").read_text()
    except OSError:
        return None
    code: int | None = None
    for child in children.split():
        fields = _stat_fields(int(child))
        if fields is None:
            continue  # reaped meanwhile
        if fields[0] not in ("Z", "X"):
            return False, None
        if code is None and len(fields) >= _EXIT_CODE_FIELD + 1:
            code = os.waitstatus_to_exitcode(int(fields[_EXIT_CODE_FIELD]))
    return True, code


def wait_reaped(process: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait up to ``timeout`` for ``process`` (a child of this one) to exit, and reap it;
    True once reaped. Wakes the moment it exits (a pidfd, Linux ≥ 5.3), not on the doubling
    sleeps of ``Popen.wait``, which on a cancel's path added up to milliseconds."""
    if process.poll() is not None:
        return True
    try:
        descriptor = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # not Linux, or an old kernel
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        select.select([descriptor], [], [], timeout)
    finally:
        os.close(descriptor)
    return process.poll() is not None


def signal_followers(group: int, number: signal.Signals) -> None:
    """Send ``number`` to every process of group ``group`` but its leader (a replica's
    supervisor, which then copies what its command left in the pipes into the logs). Where
    there is no ``/proc`` to find them: to the whole group, leader included."""
    if not _PROC.is_dir():
        signal_group(group, number)
        return
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == group:
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None or int(fields[2]) != group:
            continue
        try:
            os.kill(int(entry.name), number)
        except (ProcessLookupError, PermissionError):
            continue


def signal_group(group: int, number: signal.Signals) -> bool:
    """Send ``number`` to the group; False when nothing was left to signal."""
    try:
        os.killpg(group, number)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def start_supervised(
    spec: Mapping[str, Any], *, stdout: Path, stderr: Path, gate_fd: int | None
) -> subprocess.Popen[bytes]:
    """Start a replica's supervisor (``_supervise.py``), leading a new session (hence process
    group), with ``spec`` (its command, environment, identity, files) on its stdin.

    The supervisor itself gets nothing of the job: an empty environment, ``/`` as working dir,
    no job argument on its command line (see ``_supervise.py``); ``stdout``/``stderr`` (the
    logs, created 0600) are its own output, into which it copies the command's. ``gate_fd``:
    the read end of the run's gate pipe, inherited. Raises ``OSError`` when the supervisor
    itself cannot start."""
    launch = _launch_file(json.dumps(spec).encode())
    # Started with its stop signals blocked (a signal mask survives exec): one sent before it
    # has set its handlers waits for them instead of killing it (``_supervise.main``).
    stops = {
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGHUP,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGRTMIN,
    }
    before = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        with _log(stdout) as out, _log(stderr) as err:
            return subprocess.Popen(
                [sys.executable, "-I", "-S", str(SUPERVISOR)],
                cwd="/",
                env={},
                stdin=launch,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
                pass_fds=() if gate_fd is None else (gate_fd,),
            )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        os.close(launch)


def _launch_file(data: bytes) -> int:
    """A descriptor of an anonymous file holding ``data``, at offset 0: the supervisor's
    stdin. Never on disk (the spec holds the job's decrypted secrets), and unlike a pipe it
    never blocks the dispatch however large the spec or slow the supervisor's start."""
    try:
        descriptor = os.memfd_create("flotilla-launch", os.MFD_CLOEXEC)
    except (AttributeError, OSError):  # not Linux
        with tempfile.TemporaryFile() as file:  # unlinked at once
            descriptor = os.dup(file.fileno())
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
        os.lseek(descriptor, 0, os.SEEK_SET)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _log(path: Path) -> BinaryIO:
    """``path`` opened for appending, created readable by the server alone."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")


def describe_exit(code: int) -> str:
    if code < 0:
        return f"killed by {signal_words(-code)}"
    return f"exited with code {code}"
