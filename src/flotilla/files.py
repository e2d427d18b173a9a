"""Writing a file a reader may see at any moment, without ever replacing what is not a file.

"Atomic" writes (a temporary file beside the target, renamed over it) keep a reader — or a
restart after ``kill -9`` — from seeing half a file. But a rename replaces *whatever* is at the
target: run as root, ``--output /dev/null`` turned the machine's ``/dev/null`` into a plain
file. So the rule every writer in Flotilla follows, through :func:`write_text_safely`:

* the target is a regular file, or does not exist: write beside it, fsync (when ``durable``),
  then rename over it, keeping an existing file's permission bits;
* the target exists and is a device, FIFO or socket: write to it directly, never rename;
* the target is a directory: refuse, naming the path (``IsADirectoryError``);
* a symbolic link is followed: the file it points to is replaced, the link stays a link.

This module depends on nothing else in Flotilla so any layer may use it.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def write_text_safely(path: Path | str, text: str, *, durable: bool = True) -> None:
    """Write ``text`` to ``path`` by the rule in the module docstring.

    Raises ``IsADirectoryError`` for a directory and ``OSError`` (naming the path) when the
    target cannot be written; on any failure a regular target keeps its old content and no
    temporary file is left behind.
    """
    write_bytes_safely(path, text.encode("utf-8"), durable=durable)


def write_bytes_safely(path: Path | str, data: bytes, *, durable: bool = True) -> None:
    """:func:`write_text_safely` for bytes."""
    target = Path(os.path.realpath(path))
    try:
        mode: int | None = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(f"{path}: is a directory, not a file to write")
    if mode is not None and not stat.S_ISREG(mode):
        _write_in_place(target, data)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            if mode is not None:
                os.fchmod(file.fileno(), stat.S_IMODE(mode))
            if durable:
                os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _write_in_place(target: Path, data: bytes) -> None:
    """A device, FIFO or socket: open it for writing as a shell redirection would."""
    try:
        with open(target, "wb") as file:
            file.write(data)
    except OSError as error:
        raise OSError(error.errno, f"{target}: cannot write here ({error.strerror})") from None
