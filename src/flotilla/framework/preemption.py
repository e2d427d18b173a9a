"""Victim selection shared by the preemption plugins: the fewest, least important jobs.

Kueue's minimal-preemption search: walk the candidates in order (least important first),
adding each to the victim set until the preemptor fits; then walk back over the set and drop
every victim the preemptor does not need. Candidates are units: a gang is taken whole, and a
unit holding a non-preemptible job, or a job the policy did not make eligible, is never a
candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from flotilla.framework.interfaces import PreemptionContext
from flotilla.framework.jobs import SchedulingJob

Unit = tuple[str, ...]


def candidate_units(
    context: PreemptionContext, eligible: Iterable[SchedulingJob]
) -> list[tuple[SchedulingJob, Unit]]:
    """Group eligible running jobs into whole gangs. A gang is a candidate only when every
    member is running, preemptible and eligible itself: one low-priority member does not make
    the policy's victims of the others."""
    eligible = list(eligible)
    allowed = {job.name for job in eligible}
    running = {r.job.name: r.job for r in context.running_jobs}
    seen: set[Unit] = set()
    units = []
    for job in eligible:
        unit = tuple(context.gang_of(job.name))
        if unit in seen:
            continue
        seen.add(unit)
        if all(name in allowed and name in running and running[name].preemptible for name in unit):
            units.append((job, unit))
    return units


def minimal_victims(
    context: PreemptionContext,
    preemptor: SchedulingJob,
    units: Sequence[Unit],
    admissible: Callable[[list[Unit], Unit], bool] | None = None,
    allowed: Callable[[list[str]], bool] | None = None,
) -> list[str] | None:
    """The smallest prefix-then-pruned set of units after which ``preemptor`` fits, or None.
    ``allowed`` (when given) must also hold for a set to count: a rule of the policy about
    the set as a whole, checked before the preemptor is tried without it."""

    def fits(victims: list[str]) -> bool:
        if allowed is not None and not allowed(victims):
            return False
        return context.fits_without(preemptor, victims)

    chosen: list[Unit] = []
    found = False
    for unit in units:
        if admissible is not None and not admissible(chosen, unit):
            continue
        chosen.append(unit)
        if fits(_flatten(chosen)):
            found = True
            break
    if not found:
        return None
    for unit in reversed(chosen[:-1]):
        trial = [u for u in chosen if u is not unit]
        if fits(_flatten(trial)):
            chosen = trial
    return _flatten(chosen)


def _flatten(units: Sequence[Unit]) -> list[str]:
    return [name for unit in units for name in unit]
