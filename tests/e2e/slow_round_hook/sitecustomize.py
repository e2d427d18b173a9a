"""Test-only: makes every scheduling round of a ``flotilla up`` process slow, on demand.

The end-to-end tests put this directory on ``PYTHONPATH`` of the server they start, so Python
imports it at start-up. While the file named by ``FLOTILLA_E2E_SLOW_ROUND`` exists, each
``SchedulingAlgorithm.schedule`` call first waits the number of seconds it holds, on the
snapshot it was given, honouring the round's cancel event, and then schedules as usual. A slow
round this way takes no CPU from the loop and the API, and the test decides which round is
slow.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

_SWITCH = os.environ.get("FLOTILLA_E2E_SLOW_ROUND")

if _SWITCH:
    from flotilla.scheduler.algorithm import SchedulingAlgorithm

    _schedule = SchedulingAlgorithm.schedule

    def _slow_schedule(
        self: SchedulingAlgorithm,
        snapshot: Any,
        cancel: threading.Event | None = None,
        precedence: Any = None,
    ) -> Any:
        try:
            delay = float(Path(str(_SWITCH)).read_text())
        except (OSError, ValueError):
            delay = 0.0
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and not (cancel is not None and cancel.is_set()):
            time.sleep(0.02)
        return _schedule(self, snapshot, cancel, precedence)

    SchedulingAlgorithm.schedule = _slow_schedule  # type: ignore[method-assign]
