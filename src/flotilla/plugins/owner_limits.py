"""Per-owner limits inside a queue (``owners.max_running_jobs``, ``owners.max_resources``,
and an owner's own in ``owners.limits``).

YuniKorn's user limits and Slurm's association limits (``MaxJobs``, ``GrpTRES`` per user) as a
PreFilter: a job is admitted while its owner (``scheduler/owner_order.py``: the job's ``user``,
else its submitter) runs fewer than ``max_running_jobs`` jobs of the queue and what the
owner's running jobs of the queue hold, with this job, stays within ``max_resources``. Counts
start from the round's running jobs and follow its running set (placements, preemptions), as
the quota plugin's usage does. An owner named in ``owners.limits`` has its own values for the
fields (and resources) it names there, the queue's for the others; the reason then says which.
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


@dataclass(frozen=True)
class _Caps:
    """One owner's limits in a queue, and which of them are its own (``owners.limits``)."""

    max_jobs: int | None
    own_jobs: bool
    resources: tuple[float | None, ...]
    """At the queue's limited resources' positions: the limit, ``None`` where none."""
    own_resources: tuple[bool, ...]


@dataclass
class _QueueLimits:
    resources: list[tuple[str, int]]
    """(resource name, index in the round's resource space) of every resource some owner of
    the queue is limited on."""
    default: _Caps
    overrides: dict[str, _Caps]
    jobs: dict[str, int] = field(default_factory=dict)
    held: dict[str, list[float]] = field(default_factory=dict)
    """Owner → what its running jobs of the queue hold, at the ``resources`` positions."""

    def caps(self, owner: str) -> _Caps:
        return self.overrides.get(owner, self.default)


def _limits(owners: Owners, index: dict[str, int]) -> _QueueLimits | None:
    named = dict.fromkeys(owners.max_resources or {})
    for override in owners.limits.values():
        named.update(dict.fromkeys(override.max_resources or {}))
    # A resource no cluster has cannot be held.
    resources = [(name, index[name]) for name in named if name in index]
    queue_wide = owners.max_resources or {}
    default = _Caps(
        owners.max_running_jobs,
        False,
        tuple(queue_wide.get(name) for name, _ in resources),
        tuple(False for _ in resources),
    )
    overrides: dict[str, _Caps] = {}
    for owner, override in owners.limits.items():
        own = override.max_resources or {}
        overrides[owner] = _Caps(
            override.max_running_jobs
            if override.max_running_jobs is not None
            else owners.max_running_jobs,
            override.max_running_jobs is not None,
            tuple(own.get(name, queue_wide.get(name)) for name, _ in resources),
            tuple(name in own for name, _ in resources),
        )
    limited = [default, *overrides.values()]
    if all(caps.max_jobs is None and not any(map(_set, caps.resources)) for caps in limited):
        return None
    return _QueueLimits(resources, default, overrides)


def _set(limit: float | None) -> bool:
    return limit is not None


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
    if limits.resources:
        amounts = limits.held.setdefault(owner, [0.0] * len(limits.resources))
        for position, (_, index) in enumerate(limits.resources):
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
        caps = limits.caps(owner)
        running = limits.jobs.get(owner, 0)
        if caps.max_jobs is not None and running >= caps.max_jobs:
            label = owner_label(owner)
            jobs = f"{caps.max_jobs} running job{'s' if caps.max_jobs != 1 else ''}"
            if caps.own_jobs:
                return Status.over_owner_limit(
                    f"owner {label} is at its own limit of {jobs} in "
                    f"queue {job.queue} (owners.limits.{label})"
                )
            return Status.over_owner_limit(
                f"owner {label} is at the limit of {jobs} per owner in queue {job.queue}"
            )
        if limits.resources:
            held = limits.held.get(owner)
            asked = job.total.tolist()
            for position, (name, index) in enumerate(limits.resources):
                limit = caps.resources[position]
                if limit is None:
                    continue
                holds = held[position] if held is not None else 0.0
                if holds + asked[index] > limit + 1e-9:
                    label = owner_label(owner)
                    head = (
                        f"owner {label} holds {holds:g} {name} in queue {job.queue}; with "
                        f"this job's {asked[index]:g} that is over "
                    )
                    if caps.own_resources[position]:
                        return Status.over_owner_limit(
                            head + f"its own limit of {limit:g} (owners.limits.{label})"
                        )
                    return Status.over_owner_limit(head + f"the limit of {limit:g} per owner")
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
