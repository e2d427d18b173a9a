"""Work someone waits for goes before a scheduling round on another thread of the process.

A scheduling round is pure Python and holds the GIL while it computes. Every other thread of
the process — the API serving a request, the loop stopping a cancelled job's run — needs the
GIL back after each database round trip, signal or socket write, and waits for it up to a
switch interval each time; a cancel's way through the service has dozens of such returns, and
the round competes with all of them. So the latency-bound side marks its work ``urgent()``,
and the round, at its next ``checkpoint()`` (between two jobs), stops until no urgent work is
left: it waits on an event, holding no GIL, and the other threads go on as if the round were
not there (figures in ``docs/performance.md``, *Cancel latency*).

Bounded, so requests cannot starve scheduling: one pause lasts at most ``max_pause``, and
after a pause the round computes at least as long again before it pauses anew, so a flood of
requests at most halves a round's speed. The round's decisions do not change: it only waits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

MAX_PAUSE_SECONDS = 0.02


class Precedence:
    """Shared by the threads of one process: ``urgent()`` on the latency-bound side,
    ``checkpoint()`` in the scheduling round."""

    def __init__(
        self, max_pause: float = MAX_PAUSE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_pause = max_pause
        self._clock = clock
        self._lock = threading.Lock()
        self._urgent = 0
        self._none_urgent = threading.Event()
        self._none_urgent.set()
        self.pending = False
        """Whether urgent work is under way: read by the round on every job without the lock
        (a stale value only moves its pause by one job)."""
        self._next_pause = float("-inf")

    @contextmanager
    def urgent(self) -> Iterator[None]:
        """Mark the work of this block urgent: a round pauses at its next checkpoint."""
        self.begin()
        try:
            yield
        finally:
            self.end()

    def begin(self) -> None:
        """Urgent work starts (``urgent()`` for work that is not one block)."""
        with self._lock:
            self._urgent += 1
            self.pending = True
            self._none_urgent.clear()

    def end(self) -> None:
        """Urgent work begun with ``begin`` is done."""
        with self._lock:
            self._urgent -= 1
            if self._urgent <= 0:
                self._urgent = 0
                self.pending = False
                self._none_urgent.set()

    def checkpoint(self) -> None:
        """Called by a scheduling round between two jobs: wait while urgent work is under
        way, at most ``max_pause``, unless the round has not yet computed as long as it last
        paused."""
        if not self.pending:
            return
        now = self._clock()
        if now < self._next_pause:
            return
        self._none_urgent.wait(self.max_pause)
        resumed = self._clock()
        self._next_pause = resumed + (resumed - now)
