"""Array parallelism in the simulator, as the service applies it.

An array with ``parallelism`` K has at most K elements queued-and-offered or running at once;
the others wait, in index order, until an element ends. (Retries are the lifecycle core's
``after_run``, ``flotilla/lifecycle/runs.py``, which the simulator applies on a lost cluster.)
"""

from __future__ import annotations

from collections import deque

from flotilla.sim.state import SimJob


class ArraySlots:
    """Each throttled array's elements in play (offered or running) and those held back."""

    def __init__(self) -> None:
        self._used: dict[str, int] = {}
        self._held: dict[str, deque[SimJob]] = {}

    @staticmethod
    def _array(job: SimJob) -> tuple[str, int] | None:
        array = job.spec.array
        if array is None or array.parallelism is None:
            return None
        return job.spec.name, array.parallelism

    def take(self, job: SimJob) -> str | None:
        """``None`` if ``job`` may be offered (it now holds a slot of its array); else why it
        is held back (``release`` hands it a slot later)."""
        array = self._array(job)
        if array is None or job.array_slot:
            return None
        name, parallelism = array
        if self._used.get(name, 0) < parallelism:
            self._used[name] = self._used.get(name, 0) + 1
            job.array_slot = True
            return None
        self._held.setdefault(name, deque()).append(job)
        return f"array {name}: {parallelism} of its elements are queued or running (parallelism)"

    def release(self, job: SimJob) -> SimJob | None:
        """``job`` ended: its slot goes to the next held element, returned to be queued."""
        array = self._array(job)
        if array is None:
            return None
        name, _ = array
        held = self._held.get(name, deque())
        if not job.array_slot:
            if job in held:
                held.remove(job)
            return None
        job.array_slot = False
        self._used[name] -= 1
        return held.popleft() if held else None
