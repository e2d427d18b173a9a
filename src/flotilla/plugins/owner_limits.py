"""Per-owner limits inside a queue (``owners.max_running_jobs``, ``owners.max_resources``).

YuniKorn's user limits and Slurm's association limits (``MaxJobs``, ``GrpTRES`` per user) as a
PreFilter: a job is admitted while its owner (``scheduler/owner_order.py``: the job's ``user``,
else its submitter) runs fewer than ``max_running_jobs`` jobs of the queue and what the
owner's running jobs of the queue hold, with this job, stays within ``max_resources``. Counts
start from the round's running jobs and follow its running set (placements, preemptions), as
the quota plugin's usage does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flotilla.framework.interfaces import (
    CycleStartInput,
    CycleState,
    PreFilterInput,
    RunningChange,
    Status,
)
from flotilla.framework.owners import owner_label, owner_of
from flotilla.framework.snapshot import SchedulingSnapshot
from flotilla.model.queue import Owners

_KEY = "owner-limits"


@dataclass
class _QueueLimits:
    max_jobs: int | None
    max_resources: list[tuple[str, int, float]]
    """(resource name, index in the round's resource space, limit)."""
    jobs: dict[str, int] = field(default_factory=dict)
    held: dict[str, list[float]] = field(default_factory=dict)
    """Owner → what its running jobs of the queue hold, at the ``max_resources`` indexes."""


def _limits(owners: Owners, index: dict[str, int]) -> _QueueLimits | None:
    resources = [
        (name, index[name], limit)
        for name, limit in (owners.max_resources or {}).items()
        if name in index  # a resource no cluster has cannot be held
    ]
    if owners.max_running_jobs is None and not resources:
        return None
    return _QueueLimits(owners.max_running_jobs, resources)


def start_limits(snapshot: SchedulingSnapshot) -> dict[str, _QueueLimits]:
    """Each limited queue's owners' running jobs and holdings at the round's start."""
    if not snapshot.clusters:
        return {}
    index = snapshot.clusters[0].nodes.space.index
    limited: dict[str, _QueueLimits] = {}
    for queue in snapshot.queues:
        if queue.owners is not None:
            limits = _limits(queue.owners, index)
            if limits is not None:
                limited[queue.name] = limits
    if not limited:
        return limited
    size = len(index)
    for running in snapshot.running:
        limits = limited.get(running.job.queue)
        if limits is not None:
            _change(limits, owner_of(running.job), running.held(size).tolist(), 1)
    return limited


def _change(limits: _QueueLimits, owner: str, held: list[float], sign: int) -> None:
    limits.jobs[owner] = limits.jobs.get(owner, 0) + sign
    if limits.max_resources:
        amounts = limits.held.setdefault(owner, [0.0] * len(limits.max_resources))
        for position, (_, index, _) in enumerate(limits.max_resources):
            amounts[position] += sign * held[index]


def _state(cycle: CycleState) -> dict[str, _QueueLimits] | None:
    state = cycle.data.get(_KEY)
    return state if state else None


class OwnerLimits:
    name = "owner-limits"

    def start_cycle(self, request: CycleStartInput) -> None:
        request.cycle.data[_KEY] = start_limits(request.snapshot)

    def pre_filter(self, request: PreFilterInput) -> Status:
        state = _state(request.cycle)
        if state is None:
            return Status.success()
        job = request.job
        limits = state.get(job.queue)
        if limits is None:
            return Status.success()
        owner = owner_of(job)
        running = limits.jobs.get(owner, 0)
        if limits.max_jobs is not None and running >= limits.max_jobs:
            return Status.unschedulable(
                f"owner {owner_label(owner)} is at the limit of {limits.max_jobs} running "
                f"jobs per owner in queue {job.queue}"
            )
        if limits.max_resources:
            held = limits.held.get(owner)
            asked = job.total.tolist()
            for position, (name, index, limit) in enumerate(limits.max_resources):
                holds = held[position] if held is not None else 0.0
                if holds + asked[index] > limit + 1e-9:
                    return Status.unschedulable(
                        f"owner {owner_label(owner)} holds {holds:g} {name} in queue "
                        f"{job.queue}; with this job's {asked[index]:g} that is over the limit "
                        f"of {limit:g} per owner"
                    )
        return Status.success()

    def remove_running(self, request: RunningChange) -> None:
        self._update(request, -1)

    def add_running(self, request: RunningChange) -> None:
        self._update(request, 1)

    def _update(self, request: RunningChange, sign: int) -> None:
        state = _state(request.cycle)
        limits = state.get(request.job.queue) if state is not None else None
        if limits is not None:
            _change(limits, owner_of(request.job), request.held.tolist(), sign)
