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

Bulk work yields too. A submission of a thousand jobs is urgent for the round (someone waits
for its answer), but it is a few hundred milliseconds of Python on a worker thread, and a GET
that arrives meanwhile is 3 ms of Python that someone also waits for: marked ``urgent(bulk=
True)``, such work calls ``pace()`` between items, and waits there, bounded the same way, while
urgent work that is not bulk is under way. So a read or a cancel does not share the
interpreter with a large submission or a large sync, only with what cannot pause.
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
        self._prompt = 0
        self._none_prompt = threading.Event()
        self._none_prompt.set()
        self.prompt_pending = False
        """Whether urgent work that is not bulk is under way: read by ``pace`` on every item
        without the lock, as ``pending``."""
        self._prompt_threads: dict[int, int] = {}
        """Threads that began urgent work that is not bulk: their own bulk work never waits
        for it (the loop applies a cancel, then converts jobs in the same pass)."""
        self._paced = threading.local()
        """Per bulk thread: when it may pause next (each bulk thread has its own bound)."""

    @contextmanager
    def urgent(self, bulk: bool = False) -> Iterator[None]:
        """Mark the work of this block urgent: a round pauses at its next checkpoint. With
        ``bulk``, it paces itself (``pace``) and the other urgent work does not wait for it."""
        self.begin(bulk)
        try:
            yield
        finally:
            self.end(bulk)

    def begin(self, bulk: bool = False) -> None:
        """Urgent work starts (``urgent()`` for work that is not one block)."""
        with self._lock:
            self._urgent += 1
            self.pending = True
            self._none_urgent.clear()
            if not bulk:
                self._prompt += 1
                self.prompt_pending = True
                self._none_prompt.clear()
                me = threading.get_ident()
                self._prompt_threads[me] = self._prompt_threads.get(me, 0) + 1

    def end(self, bulk: bool = False) -> None:
        """Urgent work begun with ``begin`` (with the same ``bulk``) is done."""
        with self._lock:
            self._urgent -= 1
            if self._urgent <= 0:
                self._urgent = 0
                self.pending = False
                self._none_urgent.set()
            if not bulk:
                me = threading.get_ident()
                left = self._prompt_threads.pop(me, 0) - 1
                if left > 0:
                    self._prompt_threads[me] = left
                self._prompt -= 1
                if self._prompt <= 0:
                    self._prompt = 0
                    self.prompt_pending = False
                    self._none_prompt.set()

    def pace(self) -> None:
        """Called by bulk work between two items: wait while urgent work that is not bulk is
        under way on another thread, bounded as ``checkpoint`` is (at most ``max_pause``, then
        at least as long of work before this thread pauses again). Any thread may call it:
        bulk work need not be marked urgent (the dashboard's sampler is not)."""
        if not self.prompt_pending or threading.get_ident() in self._prompt_threads:
            return
        now = self._clock()
        if now < getattr(self._paced, "next_pause", float("-inf")):
            return
        self._none_prompt.wait(self.max_pause)
        resumed = self._clock()
        self._paced.next_pause = resumed + (resumed - now)

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
