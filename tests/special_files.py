"""Helpers for tests about writing to files that are not regular files (FIFOs, devices)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def fifo_reader(fifo: Path, timeout: float = 10.0) -> Iterator[Callable[[], bytes]]:
    """Read everything written to ``fifo`` while the block runs; yields a getter for it.

    If nothing ever opened the FIFO for writing (the old bug renamed a file over it instead),
    the reader is released by opening the FIFO ourselves, and the getter returns ``b""``.
    """
    received: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as handle:
            received.append(handle.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield lambda: b"".join(received)
    finally:
        reader.join(timeout)
        if reader.is_alive():
            descriptor = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(descriptor)
            reader.join(timeout)


def character_device_copy_of_null(directory: Path) -> Path:
    """A private copy of ``/dev/null`` (same major/minor numbers): needs root, as CI has.

    Outside CI a non-root run skips; under ``CI=true`` it fails, so the check is never lost.
    """
    path = directory / "null"
    try:
        os.mknod(path, 0o666 | 0o020000, os.makedev(1, 3))
    except PermissionError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("making a character device needs root (CI runs this as root)")
    return path
