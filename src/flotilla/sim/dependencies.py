"""Dependencies in the simulator: the jobs each held job waits for, indexed by name.

Whether a job waits, is released or fails is the lifecycle core's answer
(``machine.step`` on ``Submitted`` / ``DependencyEnded``, built from ``views``); here only
the simulator's bookkeeping, as the service's gate keeps it: a held job is queued but not
in the backlog, and when a job ends only the jobs waiting for it are looked at again. In a
scenario a dependency names a job (``NAME`` or ``QUEUE/NAME``); the loader has checked that
it exists and that there are no cycles.
"""

from __future__ import annotations

from collections.abc import Mapping

from flotilla.lifecycle.view import DependencyView
from flotilla.sim.state import SimJob

UNSUBMITTED = "not submitted yet"


class Dependencies:
    def __init__(self, jobs: Mapping[str, SimJob]) -> None:
        self._jobs = jobs
        self._held: set[str] = set()
        self._waiters: dict[str, set[str]] = {}
        """Job name → the held jobs waiting for it."""

    def _target(self, name: str) -> SimJob:
        return self._jobs[name.rpartition("/")[2]]

    def views(self, job: SimJob) -> tuple[DependencyView, ...]:
        """Where each of ``job``'s dependencies stands, for the lifecycle core."""
        views = []
        for dependency in job.spec.depends_on:
            target = self._target(dependency.job)
            state = target.state.value if target.state is not None else None
            views.append(
                DependencyView(f"job {target.name}", dependency.condition, state, UNSUBMITTED)
            )
        return tuple(views)

    def hold(self, job: SimJob) -> None:
        """``job`` waits for its dependencies: ``ended`` hands it back when one ends."""
        self._held.add(job.name)
        for dependency in job.spec.depends_on:
            self._waiters.setdefault(self._target(dependency.job).name, set()).add(job.name)

    def release(self, job: SimJob) -> None:
        """``job`` no longer waits (it was offered, or failed)."""
        self._held.discard(job.name)

    def held_waiters(self, job: SimJob) -> list[SimJob]:
        """The held jobs waiting for ``job`` (which changed state without ending), in name
        order: their reasons say its new state, as the service's do."""
        return [
            self._jobs[waiter]
            for waiter in sorted(self._waiters.get(job.name, ()))
            if waiter in self._held and self._jobs[waiter].waiting
        ]

    def ended(self, name: str) -> list[SimJob]:
        """The held jobs that waited for ``name``, which just ended, to step again (in name
        order, so runs are deterministic)."""
        self._held.discard(name)
        waiters = sorted(self._waiters.pop(name, ()))
        return [self._jobs[waiter] for waiter in waiters if waiter in self._held]
