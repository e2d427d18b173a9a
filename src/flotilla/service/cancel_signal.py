"""Stopping a cancelled job's run from the API's thread, the moment the cancel commits.

The loop thread that records how runs end is also the one that commits a round's leases,
reads the change feed and builds snapshots; a cancel handed to it waited for whichever of
those it was in (written → woken p99 82–261 ms, ``docs/performance.md``). So the API's
thread, right after the store committed the cancel request, asks the run's backend to stop
it (``Backend.cancel`` is thread-safe and idempotent by contract), and the loop, when it
takes the hand-over, only follows the run to its end and commits the outcome: by then the
process has usually exited.

This is an accelerator, never the only way: whatever fails or is skipped here (no lease, an
unreachable engine, a run the backend does not know yet because its dispatch is in flight)
the loop does as before (``RunTransitions.stop_for_cancels``). Only a replica that holds the
scheduling lease stops runs: a standby's backends must not touch the leader's runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from flotilla.backends.interface import Backend, CancelOutcome, CancelRequest
from flotilla.stage_trace import trace
from flotilla.store import JobRecord

log = logging.getLogger(__name__)

AT_ONCE_LIMIT = 100
"""At most this many runs are signalled on the API's thread per request; a bulk cancel of more
leaves the rest to the loop, so the request does not wait on thousands of engine calls."""

CANCEL_REASON = "cancelled by request"


def stop_runs_at_once(backends: Mapping[str, Backend], jobs: Sequence[JobRecord]) -> set[str]:
    """Ask the backend of each job's run to stop it; the ids of the runs it knew (stopping
    now, or already stopping or ended), which the loop need not ask again. Never raises: the
    cancel is committed already, and whatever fails here the loop does again."""
    known: set[str] = set()
    for job in jobs[:AT_ONCE_LIMIT]:
        run = job.run
        if run is None or not job.cancel_requested:
            continue
        backend = backends.get(run.cluster)
        if backend is None:
            continue
        try:
            result = backend.cancel(CancelRequest(run.id, reason=CANCEL_REASON))
        except Exception:  # an unreachable engine, a closed backend: the loop retries
            log.debug("stopping the run of %s is left to the loop", job.id, exc_info=True)
            continue
        if result.outcome is not CancelOutcome.UNKNOWN_RUN:  # its dispatch may be in flight
            trace("backend-signalled", job.id)
            known.add(run.id)
    return known
