"""What the scheduling loop's parts share: the store, the backends, the JobDb, the metrics and
the lease that fences every write.

The lease lives here, not in each part, so that losing it is seen by all of them at once: a
part that writes passes ``context.lease`` as the fence, and ``None`` makes the store refuse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from flotilla.backends.interface import Backend
from flotilla.jobdb import JobDb
from flotilla.secrets import SecretBox
from flotilla.service.containment import JobFaults
from flotilla.service.metrics import SchedulerMetrics
from flotilla.service.victims import PreemptorHolds
from flotilla.store import Lease, Store


@dataclass
class LoopContext:
    store: Store
    backends: dict[str, Backend]
    jobdb: JobDb
    metrics: SchedulerMetrics
    lease: Lease | None = None
    """The scheduling lease while this replica leads; every write is fenced by it."""
    reasons: dict[str, str] = field(default_factory=dict)
    """Why each waiting job waits, from the last committed scheduling round."""
    secrets: SecretBox | None = None
    """Opens the secret env values of a payload at dispatch (``flotilla.secrets``)."""
    pace: Callable[[], None] = field(default=lambda: None)
    """Called between the items of the loop's long walks (dispatching a batch, the running
    jobs of a snapshot): ``Precedence.pace``, so a GET or a cancel need not wait for them."""
    holds: PreemptorHolds = field(default_factory=PreemptorHolds)
    """Preemptors held until their victims' runs stopped (``victims.py``)."""
    faults: JobFaults = field(default_factory=JobFaults)
    """Jobs failed by an error inside one of the loop's per-job steps (``containment.py``),
    written with the next flush."""
