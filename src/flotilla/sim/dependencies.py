"""Dependencies in the simulator: submitted jobs held until the jobs they name have ended.

The lifecycle core's rules (``flotilla.lifecycle.dependencies``), as the service applies
them: a held job is queued but not in the backlog; when a job ends, only the jobs waiting for
it are looked at again; a job whose dependency ended in a state its condition does not accept
fails with a reason naming it. In a scenario a dependency names a job (``NAME`` or
``QUEUE/NAME``); the loader has checked that it exists and that there are no cycles.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from flotilla.lifecycle import dependencies as rules
from flotilla.lifecycle.dependencies import Verdict
from flotilla.sim.state import SimJob


class Hold(Enum):
    NONE = "none"
    """No dependency left unmet: the job joins the backlog."""
    WAITING = "waiting"
    NEVER = "never"


class Dependencies:
    def __init__(self, jobs: Mapping[str, SimJob]) -> None:
        self._jobs = jobs
        self._held: set[str] = set()
        self._waiters: dict[str, set[str]] = {}
        """Job name → the held jobs waiting for it."""

    def check(self, job: SimJob) -> tuple[Hold, str]:
        """Whether a submitted ``job`` must wait, and what for (or why it never can start);
        a waiting job is held until ``ended`` releases it."""
        self._held.discard(job.name)
        waits: list[str] = []
        for dependency in job.spec.depends_on:
            target = self._jobs[dependency.job.rpartition("/")[2]]
            condition = dependency.condition
            state = target.state.value if target.state is not None else None
            found = rules.verdict(condition, state)
            if found is Verdict.MET:
                continue
            if found is Verdict.NEVER:
                assert state is not None
                return Hold.NEVER, rules.never_reason(f"job {target.name}", condition, state)
            status = "not submitted yet" if state is None else f"it is {state}"
            waits.append(rules.waits_for(f"job {target.name}", condition, status))
            self._waiters.setdefault(target.name, set()).add(job.name)
        if not waits:
            return Hold.NONE, ""
        self._held.add(job.name)
        return Hold.WAITING, rules.waiting_reason(waits)

    def moved(self, job: SimJob) -> None:
        """``job`` changed state without ending: the jobs waiting for it say its new state in
        their reason, as the service's do (``waits for job prep to succeed (it is running)``)."""
        for waiter in sorted(self._waiters.get(job.name, ())):
            held = self._jobs[waiter]
            if waiter in self._held and held.waiting:
                hold, reason = self.check(held)
                if hold is Hold.WAITING:
                    held.reason = reason

    def ended(self, name: str) -> list[SimJob]:
        """The held jobs that waited for ``name``, which just ended, to check again (in name
        order, so runs are deterministic)."""
        self._held.discard(name)
        waiters = sorted(self._waiters.pop(name, ()))
        return [self._jobs[waiter] for waiter in waiters if waiter in self._held]
