"""Give the C allocator's free memory back to the system once finished jobs have left.

Dropping finished jobs frees their objects, but glibc's ``malloc`` keeps most freed memory in
its arenas (one per thread that allocated: the API's worker threads, the loop, the runs), and
memory that is free but not at the top of an arena is never returned on its own. Without a
trim the server's resident memory climbs in steps to the highest it has ever needed and stays
there, although the live objects stay flat (``docs/performance.md``, the soak).
``malloc_trim(0)`` returns the free pages of every arena. It takes a few milliseconds on a
heap of a few hundred MiB and releases the GIL meanwhile, so it runs at most once per
``every`` seconds, after a sweep that dropped jobs. Elsewhere than glibc (musl, macOS) it is
a no-op.
"""

from __future__ import annotations

import ctypes
import platform
import time
from collections.abc import Callable

TRIM_EVERY_SECONDS = 30.0


def glibc_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None on another C library."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    trim: Callable[[int], int] = ctypes.CDLL("libc.so.6").malloc_trim
    return trim


class AllocatorTrim:
    """Calls ``trim`` once jobs were dropped, at most once per ``every`` seconds."""

    def __init__(
        self,
        trim: Callable[[int], int] | None,
        every: float = TRIM_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._trim = trim
        self._every = every
        self._clock = clock
        self._last = clock()
        self._dropped = 0

    def note_dropped(self, jobs: int) -> None:
        """``jobs`` finished jobs have just left memory."""
        self._dropped += jobs

    def trim_if_due(self) -> bool:
        """Trim if jobs were dropped since the last trim and ``every`` seconds have passed;
        whether it trimmed."""
        if self._trim is None or not self._dropped:
            return False
        now = self._clock()
        if now - self._last < self._every:
            return False
        self._last, self._dropped = now, 0
        self._trim(0)
        return True
