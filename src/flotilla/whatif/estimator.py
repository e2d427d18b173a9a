"""How long a job will run: quantiles of alike past runs, bounded by its ``max_runtime``.

Users' own runtime estimates are known to be poor (mostly generous limits, Tsafrir, Etsion and
Feitelson 2007); what predicts a job best is the recent runs of the same user's same job. So
the history method looks for the most specific group of past runs with enough of them —
same queue, owner and name; then same queue and owner; then the queue; then every run — and
takes its median. A job already running for longer than that gets the median of the runs of
its group that lasted longer than it has run so far (a conditional estimate), or, when none
did, a quarter of what it has run so far on top.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from flotilla.model.scenario import RuntimeEstimate, RuntimeSource

MIN_RUNS = 2
"""Past runs a group needs before its quantile is trusted."""
RECENT_RUNS = 50
"""Only the most recent runs of a group count: jobs change."""


class EstimatorMethod(StrEnum):
    AUTO = "auto"
    """Its history first, never past its ``max_runtime`` (the limit bounds a run; users
    over-ask, so the limit alone over-estimates about threefold: docs/performance.md,
    What-if), and its ``max_runtime`` when it has no history."""
    MAX_RUNTIME = "max_runtime"
    """The job's ``max_runtime`` only; without one, no estimate."""
    HISTORY = "history"
    """Its history first, its ``max_runtime`` when it has none."""


@dataclass(frozen=True)
class PastRun:
    """One finished run: whose, and how long it ran (seconds)."""

    queue: str
    owner: str | None
    name: str
    seconds: float


@dataclass(frozen=True)
class EstimateInput:
    queue: str
    owner: str | None
    name: str
    max_runtime: float | None
    elapsed: float = 0.0
    """Seconds it has run so far (0 for a waiting job)."""


@dataclass
class RuntimeHistory:
    """Past runs grouped at each level of likeness, most recent first."""

    groups: dict[tuple[str, ...], list[float]] = field(default_factory=dict)

    @classmethod
    def of(cls, runs: Iterable[PastRun]) -> RuntimeHistory:
        """``runs`` most recent first."""
        history = cls()
        for run in runs:
            for key in _keys(run.queue, run.owner, run.name):
                found = history.groups.setdefault(key, [])
                if len(found) < RECENT_RUNS:
                    found.append(run.seconds)
        return history

    def estimate(
        self, job: EstimateInput, method: EstimatorMethod = EstimatorMethod.AUTO
    ) -> RuntimeEstimate:
        """The expected total runtime of ``job`` and its basis in words."""
        own = _own(job)
        if method is EstimatorMethod.MAX_RUNTIME:
            return own
        learned = self._from_history(job)
        if learned is None:
            return own
        limit, seconds = job.max_runtime, learned.seconds
        if method is EstimatorMethod.AUTO and limit is not None and (seconds or 0.0) > limit:
            return RuntimeEstimate(
                seconds=limit,
                source=RuntimeSource.MAX_RUNTIME,
                basis=f"its max_runtime, under the {learned.basis}",
            )
        return learned

    def _from_history(self, job: EstimateInput) -> RuntimeEstimate | None:
        for key, words in zip(_keys(job.queue, job.owner, job.name), _WORDS, strict=True):
            runs = self.groups.get(key, [])
            if len(runs) < MIN_RUNS:
                continue
            longer = [seconds for seconds in runs if seconds > job.elapsed]
            subject = words.format(queue=job.queue, owner=job.owner or "-", name=job.name)
            if job.elapsed <= 0:  # not started: every run counts, however short
                seconds = _median(runs)
                basis = f"p50 of {len(runs)} runs of {subject}"
            elif not longer:
                seconds = job.elapsed * 1.25
                basis = f"ran past all {len(runs)} runs of {subject}: a quarter more"
            else:
                seconds = _median(longer)
                basis = f"p50 of the {len(longer)} of {len(runs)} runs of {subject} this long"
            return RuntimeEstimate(seconds=seconds, source=RuntimeSource.HISTORY, basis=basis)
        return None


_WORDS = (
    "queue {queue}, owner {owner}, name {name}",
    "queue {queue}, owner {owner}",
    "queue {queue}",
    "every queue",
)


def _keys(queue: str, owner: str | None, name: str) -> tuple[tuple[str, ...], ...]:
    who = owner or ""
    return ((queue, who, name), (queue, who), (queue,), ())


def _own(job: EstimateInput) -> RuntimeEstimate:
    if job.max_runtime is None:
        return RuntimeEstimate()
    return RuntimeEstimate(
        seconds=job.max_runtime, source=RuntimeSource.MAX_RUNTIME, basis="its max_runtime"
    )


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
