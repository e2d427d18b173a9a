"""EASY backfill: when a blocked job will fit, judging by running jobs' expected ends.

Running jobs release their resources at ``start + expected runtime`` (the simulator's
``duration``, a real run's ``max_runtime``); jobs without one never do. The reservation time is
the earliest such end after which the strategy can place the job — found by binary search,
since more releases never make a job fit worse.
"""

from __future__ import annotations

from flotilla.framework.interfaces import Assignment, SelectionInput, cluster_admits
from flotilla.framework.jobs import SchedulingJob
from flotilla.scheduler.placement import place_job
from flotilla.scheduler.scheduling_round import SchedulingRound


def find_reservation(
    scheduling_round: SchedulingRound, job: SchedulingJob, pinned: str | None, minimum: int | None
) -> tuple[float, Assignment] | None:
    ends = sorted(
        (max(r.started_at + r.job.expected_runtime, scheduling_round.now), name)
        for name, r in scheduling_round.running.items()
        if r.job.expected_runtime is not None
    )
    if not ends:
        return None
    times = sorted({end for end, _ in ends})

    def probe(index: int) -> Assignment | None:
        horizon = times[index]
        clusters = {c.name: c.snapshot() for c in scheduling_round.ready(long=True)}
        for end, name in ends:
            if end > horizon:
                break
            running = scheduling_round.running[name]
            cluster = clusters.get(running.assignment.cluster)
            if cluster is None:
                continue
            for placement in running.assignment.placements:
                cluster.nodes.release(placement.row, placement.request, placement.gpus)
        candidates = [
            c
            for c in clusters.values()
            if (pinned is None or c.name == pinned) and cluster_admits(c, job)
        ]
        decision = scheduling_round.strategy.select(
            SelectionInput(
                job=job,
                clusters=sorted(candidates, key=lambda c: c.order),
                place=lambda cluster: place_job(
                    scheduling_round.framework,
                    job,
                    cluster,
                    scheduling_round.cycle,
                    keep=False,
                    minimum=minimum,
                    caches=scheduling_round.caches,
                ),
            )
        )
        return decision.assignment

    if probe(len(times) - 1) is None:
        return None
    low, high = 0, len(times) - 1
    while low < high:
        middle = (low + high) // 2
        if probe(middle) is not None:
            high = middle
        else:
            low = middle + 1
    assignment = probe(low)
    assert assignment is not None
    return times[low], assignment
