"""The scheduling lease: take it, renew it every cycle, release it on the way out.

Only the holder schedules and writes. Every write is fenced by the lease token, so a replica
that lost the lease (a long pause, a partition) cannot commit anything; the loop stops
scheduling at once when a renewal fails or a fenced write is refused.
"""

from __future__ import annotations

import logging

from flotilla.scheduler.context import LoopContext
from flotilla.store import StoreError

log = logging.getLogger(__name__)


class Leadership:
    def __init__(self, context: LoopContext, name: str, replica: str, ttl: float) -> None:
        self._context = context
        self._name = name
        self._replica = replica
        self._ttl = ttl

    def hold(self) -> bool:
        """Renew the lease, or try to take it; True when this call started a new term (the
        caller then recovers the previous term's in-flight state)."""
        context = self._context
        if context.lease is not None:
            renewed = context.store.renew_lease(context.lease, self._ttl)
            if renewed is None:
                self.lose()
            else:
                context.lease = renewed
            return False
        acquired = context.store.try_acquire_lease(self._name, self._replica, self._ttl)
        if acquired is None:
            return False
        context.lease = acquired
        context.metrics.leader.set(1)
        return True

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
