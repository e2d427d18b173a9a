"""Victim selection shared by the preemption plugins: the fewest, least important jobs.

Kueue's minimal-preemption search: walk the candidates in order (least important first),
adding each to the victim set until the preemptor fits; then walk back over the set and drop
every victim the preemptor does not need. Candidates are units: a gang is taken whole, and a
unit holding a non-preemptible job, a job the policy did not make eligible, or a job still
within its ``min_runtime``, is never a candidate.

Work a victim loses (issue 28): the GPU-seconds it ran since its last checkpoint
(``lost_work``); among victims of one priority the plugins take the least first. A run that
reported a checkpoint (``flotilla.checkpoint()``, ``RunningJob.last_checkpoint_at``) saved its
work then; a job that declares ``checkpoint_every`` saved it at each multiple of it since its
run started; the later of the two counts. Any other job loses everything since its start.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from flotilla.framework.interfaces import PreemptionContext
from flotilla.framework.jobs import SchedulingJob
from flotilla.framework.snapshot import RunningJob

Unit = tuple[str, ...]


def protected(running: RunningJob, now: float) -> bool:
    """Within its ``min_runtime``: not a victim yet."""
    least = running.job.min_runtime
    return least is not None and now - running.started_at < least


def last_checkpoint(running: RunningJob, now: float) -> float:
    """When the run last saved its work: the later of its reported checkpoint and the last
    multiple of ``checkpoint_every`` since it started, else its start. A reported time is
    held within [start, now] (the job writes the file's time)."""
    every = running.job.checkpoint_every
    started = running.started_at
    declared = started
    if every is not None and now > started:
        declared = started + math.floor((now - started) / every) * every
    reported = running.last_checkpoint_at
    if reported is None:
        return declared
    return max(declared, min(max(reported, started), max(now, started)))


def gpus_of(job: SchedulingJob) -> float:
    return sum(task.gpu * task.replicas for task in job.tasks)


def lost_work(running: RunningJob, now: float) -> float:
    """GPU-seconds since the run's last checkpoint: what preempting it now throws away."""
    gpus = gpus_of(running.job)
    if not gpus:
        return 0.0
    return gpus * max(0.0, now - last_checkpoint(running, now))


def candidate_units(
    context: PreemptionContext, eligible: Iterable[SchedulingJob]
) -> list[tuple[SchedulingJob, Unit]]:
    """Group eligible running jobs into whole gangs. A gang is a candidate only when every
    member is running, preemptible and eligible itself: one low-priority member does not make
    the policy's victims of the others."""
    eligible = list(eligible)
    now = context.now
    allowed = {job.name for job in eligible}
    running = {r.job.name: r.job for r in context.running_jobs if not protected(r, now)}
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
