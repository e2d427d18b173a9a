"""What a batch supervisor (``_supervise.py``) writes: its commands' logs, within the run's
budget (``Budget``, ``Stream``), and its outcome files (``write``, ``sync_filesystem``).
Standard library only (imported by path, like ``_job_init``)."""

from __future__ import annotations

import fcntl
import json
import os
import stat


def write(
    path: str, outcome: dict[str, object], *, durable: bool = True, rename: bool = True
) -> None:
    """Write-then-rename, as ``flotilla.files`` does (this file may import nothing of
    Flotilla): a device or FIFO at ``path`` is written in place, never replaced. Not
    ``durable``: no fsync (see ``_supervise._Batch._write_outcomes``)."""
    try:
        special = not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        special = False
    if special:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(outcome, file)
        return
    temporary = f"{path}.tmp"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        json.dump(outcome, file)
        if durable:
            file.flush()
            os.fsync(file.fileno())
    if rename:
        os.replace(temporary, path)


def sync_filesystem(path: str) -> None:
    """``syncfs`` of the filesystem holding ``path`` (every file written so far on it)."""
    import ctypes

    descriptor = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        ctypes.CDLL(None, use_errno=True).syncfs(descriptor)
    finally:
        os.close(descriptor)


class Budget:
    """The run's log budget, shared by all its supervisors through a counter file."""

    def __init__(self, path: str | None, limit: int | None) -> None:
        self.limit = limit
        self.exhausted = False
        self._fd = (
            None if path is None or limit is None else os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        )

    def take(self, wanted: int) -> int:
        """How many of ``wanted`` bytes may still be written (all of them without a limit)."""
        if self.limit is None or self._fd is None:
            return wanted
        if self.exhausted:
            return 0
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            raw = os.pread(self._fd, 8, 0)
            used = int.from_bytes(raw, "little") if len(raw) == 8 else 0
            granted = max(0, min(wanted, self.limit - used))
            if granted:
                os.pwrite(self._fd, (used + granted).to_bytes(8, "little"), 0)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        if granted < wanted:
            self.exhausted = True
        return granted


class Stream:
    """One of the command's output pipes and the log it is copied into, created when the
    command first writes to it (a command that writes nothing costs no file: two fewer per
    replica to create, 20,000 at 10,000 replicas; a missing log reads as empty)."""

    def __init__(self, source: int, path: str) -> None:
        self.source, self.path = source, path
        self.target: int | None = None
        self.last = b"\n"
        self.noted = False

    def copy(self, data: bytes, budget: Budget, note: str) -> None:
        granted = budget.take(len(data))
        if granted:
            self._append(data[:granted])
            self.last = data[granted - 1 : granted]
        if granted < len(data) and not self.noted:
            self.noted = True
            self._append((b"" if self.last == b"\n" else b"\n") + note.encode() + b"\n")

    def _append(self, data: bytes) -> None:
        if self.target is None:
            try:
                self.target = open_log(self.path)
            except OSError:
                return  # the log cannot be made (disk full): the command's outcome still counts
        write_all(self.target, data)

    def close(self) -> None:
        os.close(self.source)
        if self.target is not None:
            os.close(self.target)


def write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(descriptor, view)
        except OSError:
            return  # the log cannot be written (disk full): the command's outcome still counts
        view = view[written:]


def open_log(path: str) -> int:
    """A replica's log, opened for appending, created readable by the server alone."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
