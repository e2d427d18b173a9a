"""Kill at a chosen point: a test hook that makes this process SIGKILL itself at a named place
in the scheduler's safety code, so crash tests are deterministic instead of depending on where
a timed ``kill -9`` happens to land.

Off in production: armed only by the environment variable ``FLOTILLA_FAULT``, read once at
import. Unset (the default), ``crash_point`` is one comparison against None.

``FLOTILLA_FAULT=POINT`` kills the process the first time it reaches ``POINT``;
``FLOTILLA_FAULT=POINT@N`` the N-th time. Before dying it writes one line,
``flotilla fault: killed at POINT``, to standard error, so a test can tell the hook fired
from a crash of another kind. The points (``POINTS``):

- ``mid-cycle-write``: inside the transaction of a cycle's write that leases runs
  (``Store.commit_cycle``): its transitions are applied, its leases not yet, nothing is
  committed.
- ``after-lease-commit``: a cycle's run leases are committed (``queued → leased``), nothing
  of them dispatched yet.
- ``after-dispatch``: a batch of runs was handed to the backends; their ``pending`` is not
  recorded yet.
- ``mid-batch``: half of a batch of at least two runs was handed to the backends.
- ``during-cancel``: a backend was asked to stop a cancelled job's run; nothing recorded.
- ``during-renewal``: the scheduling lease's renewal is committed, the loop has not seen it.

Random kills at arbitrary moments are a different tool (the fault-injection suite); this
module only names the points where a crash is hardest to get right.
"""

from __future__ import annotations

import os
import signal
import sys

ENVIRONMENT = "FLOTILLA_FAULT"
POINTS = frozenset(
    {
        "mid-cycle-write",
        "after-lease-commit",
        "after-dispatch",
        "mid-batch",
        "during-cancel",
        "during-renewal",
    }
)


def _armed(value: str | None) -> tuple[str, int] | None:
    """Parse ``POINT`` or ``POINT@N``; a bad value fails at once, naming the variable."""
    if not value:
        return None
    point, _, count = value.partition("@")
    if point not in POINTS:
        raise ValueError(f"{ENVIRONMENT}: unknown point {point!r} (one of {sorted(POINTS)})")
    if count and (not count.isdigit() or int(count) < 1):
        raise ValueError(f"{ENVIRONMENT}: {value!r}: the count after @ must be 1 or more")
    return point, int(count or 1)


_ARMED = _armed(os.environ.get(ENVIRONMENT))
_reached = 0


def crash_point(point: str) -> None:
    """SIGKILL this process here if ``FLOTILLA_FAULT`` names ``point`` (and this is its N-th
    time); otherwise do nothing."""
    global _reached
    if _ARMED is None or _ARMED[0] != point:
        return
    _reached += 1
    if _reached < _ARMED[1]:
        return
    sys.stderr.write(f"flotilla fault: killed at {point}\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
