"""The scheduling lease: take it, keep it renewed, release it on the way out.

Only the holder schedules and writes. Every write is fenced by the lease token, so a replica
that lost the lease (a long pause, a partition) cannot commit anything; the loop stops
scheduling at once when a renewal fails or a fenced write is refused.

While the loop runs, the held lease is renewed by a thread of its own (``start_renewing``),
not by the loop's cycles: a scheduling round runs inline in sync mode, and one longer than
the TTL (19,600 queued jobs on a loaded machine, or 8,000 with ``--lease-ttl 2``) let the
lease lapse and was thrown away at its commit, round after round, with one replica and no
one else wanting the lease. And a term that ran out anyway (the process kept off the CPU, the
database slow) goes on when nobody took a newer one (``Store.resume_lease``): a round's work
is discarded only when another replica actually holds a newer term.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from flotilla.faults import crash_point
from flotilla.service.context import LoopContext
from flotilla.store import StoreError

log = logging.getLogger(__name__)

RENEW_SHARE = 0.2
"""A held lease is renewed once this share of its TTL has passed since the last renewal."""

RENEW_RETRY_SECONDS = 1.0
"""After a renewal between cycles failed (the database unreachable), the next try."""


class Leadership:
    def __init__(self, context: LoopContext, name: str, replica: str, ttl: float) -> None:
        self._context = context
        self._name = name
        self._replica = replica
        self._ttl = ttl
        self._renewed_at = float("-inf")
        self._guard = threading.Lock()
        """Serialises changes of ``context.lease`` between the loop and the renewing thread."""
        self._renewer: threading.Thread | None = None
        self._stop_renewing = threading.Event()
        self._lost = False
        """The renewing thread found the term over; the loop's thread drops it (``hold``)."""
        self._on_lost: Callable[[], None] = lambda: None

    def hold(self) -> bool:
        """Renew the lease, or try to take it; True when this call started a new term (the
        caller then recovers the previous term's in-flight state).

        A held lease is renewed once ``RENEW_SHARE`` of its TTL has passed, not every cycle:
        a renewal is a durable write, and with 0.1 s cycles those writes held up the cancels
        and transitions queued behind them. Safety does not depend on it — every write is
        fenced — and four fifths of the TTL remain as margin."""
        context = self._context
        if context.lease is not None:
            if self._lost:
                self.lose()
            elif self._renewer is None:  # no renewing thread (a test driving cycles)
                if time.monotonic() - self._renewed_at >= self._ttl * RENEW_SHARE:
                    self._renew()
                if self._lost:
                    self.lose()
            return False
        acquired = context.store.try_acquire_lease(self._name, self._replica, self._ttl)
        if acquired is None:
            return False
        with self._guard:
            context.lease = acquired
            self._lost = False
            self._renewed_at = time.monotonic()
        context.metrics.leader.set(1)
        return True

    def _renew(self) -> None:
        """Renew the held lease once (either thread); a term that ran out goes on unless
        another replica began a newer one, else it is marked lost for the loop's thread.
        Raises ``StoreError`` when the database cannot be reached."""
        lease = self._context.lease
        if lease is None or self._lost:
            return
        renewed = self._context.store.renew_lease(lease, self._ttl)
        crash_point("during-renewal")
        if renewed is None:
            renewed = self._context.store.resume_lease(lease, self._ttl)
            if renewed is not None:
                log.warning("the scheduling lease had run out; no one took it: term goes on")
        with self._guard:
            if self._context.lease is not lease:
                return  # dropped meanwhile by the loop's thread
            if renewed is None:
                self._lost = True
            else:
                self._context.lease = renewed
                self._renewed_at = time.monotonic()
        if renewed is None:
            log.warning("lost the scheduling lease: another replica holds a newer term")
            self._on_lost()

    def resume(self) -> bool:
        """After a fenced write was refused: whether the term goes on (its lease ran out
        but no one took a newer one; now extended) — the write may be made again."""
        lease = self._context.lease
        if lease is None or self._lost:
            return False
        resumed = self._context.store.resume_lease(lease, self._ttl)
        with self._guard:
            if resumed is None or self._context.lease is not lease:
                return False
            self._context.lease = resumed
            self._renewed_at = time.monotonic()
        log.warning("a write found the scheduling lease run out; no one took it: term goes on")
        return True

    # --- the renewing thread --------------------------------------------------------------

    def start_renewing(self, on_lost: Callable[[], None]) -> None:
        """Renew the held lease from a thread of its own from now on (``on_lost``: called
        on that thread when the term is over, to wake the loop)."""
        if self._renewer is not None:
            return
        self._on_lost = on_lost
        self._stop_renewing.clear()
        self._renewer = threading.Thread(target=self._renew_forever, name="flotilla-lease")
        self._renewer.daemon = True
        self._renewer.start()

    def stop_renewing(self) -> None:
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            self._stop_renewing.set()
            renewer.join()

    def _renew_forever(self) -> None:
        while True:
            due = self._ttl * RENEW_SHARE
            if self._context.lease is not None:
                due = max(0.0, self._renewed_at + self._ttl * RENEW_SHARE - time.monotonic())
            if self._stop_renewing.wait(due):
                return
            try:
                if self._context.lease is not None and self._due():
                    self._renew()
            except StoreError:
                log.warning("could not renew the scheduling lease; retrying", exc_info=True)
                self._stop_renewing.wait(min(RENEW_RETRY_SECONDS, self._ttl * RENEW_SHARE))
            except Exception:  # never let the thread die: the lease would lapse unseen
                log.exception("renewing the scheduling lease failed; retrying")
                self._stop_renewing.wait(min(RENEW_RETRY_SECONDS, self._ttl * RENEW_SHARE))

    def _due(self) -> bool:
        return time.monotonic() - self._renewed_at >= self._ttl * RENEW_SHARE

    def renewal_due_in(self) -> float | None:
        """Seconds until the held lease is due for renewal by the loop (0: now); ``None``
        when not held, or when the renewing thread renews it."""
        if self._context.lease is None or self._renewer is not None:
            return None
        return max(0.0, self._renewed_at + self._ttl * RENEW_SHARE - time.monotonic())

    def renew_between_cycles(self) -> bool:
        """Renew the held lease if it is due, between cycles further apart than its renewal
        period (a cycle renews it otherwise): with cycles 30 s apart and a 10 s lease, the
        lease lapsed between cycles, and every other cycle — the one a submission's wake ran
        — began a new term instead of scheduling. True when the lease was just lost (the
        caller drops the term's in-flight state). A failed write is logged and tried again
        ``RENEW_RETRY_SECONDS`` later; the lease lapses if it keeps failing."""
        if self._lost and self._context.lease is not None:
            self.lose()
            return True
        if self.renewal_due_in() != 0.0:
            return False  # not held, not due yet, or the renewing thread's work
        try:
            self.hold()
        except StoreError:
            log.warning("could not renew the scheduling lease; retrying", exc_info=True)
            self._renewed_at = time.monotonic() - self._ttl * RENEW_SHARE + RENEW_RETRY_SECONDS
            return False
        return self._context.lease is None

    def lose(self) -> None:
        """Forget the lease without writing (it was lost, or is about to be released)."""
        with self._guard:
            self._context.lease = None
            self._lost = False
        self._context.metrics.leader.set(0)
        self._context.reasons = {}

    def release(self) -> None:
        """Give the lease up so another replica can take over without waiting for the TTL."""
        lease = self._context.lease
        if lease is None:
            return
        try:
            self._context.store.release_lease(lease)
        except StoreError:
            log.warning("could not release the scheduling lease; it will expire")
        self.lose()
