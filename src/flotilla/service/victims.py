"""Preemptors that wait for their victims' runs to stop (issue 36), in the service.

The lifecycle core's rule (``lifecycle/preemption.py``): a round that evicts victims to place
a job does not lease that job while a victim's run still stops; the victim stays preempted,
its resources allocated in every snapshot (``snapshots.py``), and the preemptor is held out
of the backlog with a reason naming whom it waits for. The commit records the wait
(``commit.py``), the backend's confirmed stop ends it (``transitions.py``), and the snapshot
builder takes the preemptors whose hold changed to look at them again.
"""

from __future__ import annotations

from flotilla.lifecycle.preemption import VictimWaits
from flotilla.store import JobRecord


def victim_label(record: JobRecord) -> str:
    """How a preemptor's reason names a victim: ``job q/low (1a2b3c4d)``."""
    return f"job {record.queue}/{record.name} ({record.id[:8]})"


class PreemptorHolds:
    """The waits, by job id, and the preemptors whose hold began or ended since the snapshot
    builder last took them."""

    def __init__(self) -> None:
        self.waits = VictimWaits()
        self._changed: set[str] = set()

    def wait(self, preemptor: str, victims: list[JobRecord]) -> str:
        self._changed.add(preemptor)
        return self.waits.wait(preemptor, {v.id: victim_label(v) for v in victims})

    def held(self, job_id: str) -> str | None:
        """Why ``job_id`` is held back, if it waits for victims."""
        return self.waits.reason(job_id) if self.waits.waiting(job_id) else None

    def stopped(self, victim: str) -> None:
        self._changed.update(self.waits.stopped(victim))

    def take_changed(self) -> set[str]:
        changed, self._changed = self._changed, set()
        return changed

    def clear(self) -> None:
        """A new term: the waits are forgotten (the preemptors are offered again; the
        victims still stopping keep their resources in the snapshot)."""
        self._changed.update(self.waits.waiting_ids())
        self.waits.clear()
