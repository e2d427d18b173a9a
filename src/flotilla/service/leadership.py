"""The scheduling lease: take it, renew it every cycle, release it on the way out.

Only the holder schedules and writes. Every write is fenced by the lease token, so a replica
that lost the lease (a long pause, a partition) cannot commit anything; the loop stops
scheduling at once when a renewal fails or a fenced write is refused.
"""

from __future__ import annotations

import logging
import time

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

    def hold(self) -> bool:
        """Renew the lease, or try to take it; True when this call started a new term (the
        caller then recovers the previous term's in-flight state).

        A held lease is renewed once ``RENEW_SHARE`` of its TTL has passed, not every cycle:
        a renewal is a durable write, and with 0.1 s cycles those writes held up the cancels
        and transitions queued behind them. Safety does not depend on it — every write is
        fenced — and four fifths of the TTL remain as margin."""
        context = self._context
        if context.lease is not None:
            if time.monotonic() - self._renewed_at < self._ttl * RENEW_SHARE:
                return False
            renewed = context.store.renew_lease(context.lease, self._ttl)
            crash_point("during-renewal")
            if renewed is None:
                self.lose()
            else:
                context.lease = renewed
                self._renewed_at = time.monotonic()
            return False
        acquired = context.store.try_acquire_lease(self._name, self._replica, self._ttl)
        if acquired is None:
            return False
        context.lease = acquired
        self._renewed_at = time.monotonic()
        context.metrics.leader.set(1)
        return True

    def renewal_due_in(self) -> float | None:
        """Seconds until the held lease is due for renewal (0: now); ``None`` when not held."""
        if self._context.lease is None:
            return None
        return max(0.0, self._renewed_at + self._ttl * RENEW_SHARE - time.monotonic())

    def renew_between_cycles(self) -> bool:
        """Renew the held lease if it is due, between cycles further apart than its renewal
        period (a cycle renews it otherwise): with cycles 30 s apart and a 10 s lease, the
        lease lapsed between cycles, and every other cycle — the one a submission's wake ran
        — began a new term instead of scheduling. True when the lease was just lost (the
        caller drops the term's in-flight state). A failed write is logged and tried again
        ``RENEW_RETRY_SECONDS`` later; the lease lapses if it keeps failing."""
        if self.renewal_due_in() != 0.0:
            return False  # not held, or not due yet
        try:
            self.hold()
        except StoreError:
            log.warning("could not renew the scheduling lease; retrying", exc_info=True)
            self._renewed_at = time.monotonic() - self._ttl * RENEW_SHARE + RENEW_RETRY_SECONDS
            return False
        return self._context.lease is None

    def lose(self) -> None:
        """Forget the lease without writing (it was lost, or is about to be released)."""
        self._context.lease = None
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
