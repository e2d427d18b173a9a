"""Array parallelism in the simulator: the lifecycle core's ``ArrayThrottle``, per array.

An array with ``parallelism`` K has at most K elements offered to the scheduler or running at
once; the others wait, in index order, until an element ends or goes back to waiting (it then
asks again, behind those already waiting) — the service's rule (``service/admission.py``).
The simulator's interpreter drives it from the core's ``Offer`` and ``FreeArraySlot``
effects (``sim/interpreter.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from flotilla.lifecycle.arrays import ArrayThrottle
from flotilla.sim.state import SimJob


class ArraySlots:
    """Each throttled array's slots, by array name; the elements by job name."""

    def __init__(self, jobs: Mapping[str, SimJob]) -> None:
        self._jobs = jobs
        self._arrays: dict[str, ArrayThrottle] = {}

    def _array(self, job: SimJob) -> ArrayThrottle | None:
        array = job.spec.array
        if array is None or array.parallelism is None:
            return None
        found = self._arrays.get(job.spec.name)
        if found is None:
            found = self._arrays[job.spec.name] = ArrayThrottle(array.parallelism)
        return found

    @staticmethod
    def _index(job: SimJob) -> int:
        return int(job.name.rpartition("-")[2])

    def take(self, job: SimJob) -> str | None:
        """``None`` if ``job`` may be offered (it now holds a slot of its array); else why it
        is held back (a later ``release`` or ``stopped`` hands it a slot)."""
        array = self._array(job)
        if array is None or array.offer(job.name, self._index(job)):
            return None
        return array.reason(job.spec.name)

    def started(self, job: SimJob) -> None:
        array = self._array(job)
        if array is not None:
            array.activate(job.name)

    def stopped(self, job: SimJob) -> list[SimJob]:
        """``job`` went back to waiting (preempted, re-queued): it gives up its slot; the
        held elements that get one, to be queued (``job`` then asks again)."""
        array = self._array(job)
        if array is None:
            return []
        array.deactivate(job.name)
        array.leave(job.name)
        return [self._jobs[name] for name in array.release()]

    def release(self, job: SimJob) -> list[SimJob]:
        """``job`` ended: its slot goes to the held elements, returned to be queued."""
        return self.stopped(job)
