"""Process groups on this machine: start a supervised replica, signal it, tell if it is alive.

Linux-first: identity and liveness come from ``/proc`` (a pid alone can be reused; a pid plus
its start time cannot), with ``kill(pid, 0)`` as the fallback elsewhere.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

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


def process_alive(pid: int, ticks: int | None) -> bool:
    """True when ``pid`` is still the process that was started (not a zombie, not reused)."""
    if _PROC.is_dir():
        fields = _stat_fields(pid)
        if fields is None or fields[0] in ("Z", "X"):
            return False
        return ticks is None or int(fields[19]) == ticks
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_alive(group: int) -> bool:
    """True while any non-zombie process is left in process group ``group``."""
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
        if fields and int(fields[2]) == group and fields[0] not in ("Z", "X"):
            return True
    return False


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
    argv: Sequence[str],
    *,
    exit_file: Path,
    gate_file: Path,
    stdout: Path,
    stderr: Path,
    env: Mapping[str, str],
    working_dir: Path,
    user: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` under the supervisor, leading a new session (hence process group).

    ``user``: run the command (not the supervisor) as this user. Raises ``OSError`` when the
    supervisor itself cannot start (e.g. no such working dir).
    """
    with stdout.open("ab") as out, stderr.open("ab") as err:
        return subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                str(SUPERVISOR),
                str(exit_file),
                str(gate_file),
                *(["--user", user] if user is not None else []),
                "--",
                *argv,
            ],
            cwd=working_dir,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            close_fds=True,
        )


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by signal {name}"
    return f"exited with code {code}"
