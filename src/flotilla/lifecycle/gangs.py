"""Gang rules of a job's life: which gangs may grow while they run, and the words for a gang
that times out, waits for members, or grows.

A strict gang places every replica at once or none. A non-strict gang of one job
(``gang.mode: non-strict`` with ``min_member`` below its replicas) starts once ``min_member``
replicas fit together and adds the rest as they fit, on the same cluster (the engine's growth
pass, ``scheduler/algorithm.py``); the service and the simulator apply each growth to the
running job. A queued gang that cannot start within ``gang.timeout`` seconds of becoming
schedulable fails.
"""

from __future__ import annotations

from flotilla.model.job import GangMode, JobSpec

GROWTH_EVENT = "expanded"
"""The event of a running non-strict gang that took more replicas: the simulator's report and
the service's job history name it alike."""


def wanted_replicas(spec: JobSpec) -> int:
    """Every replica of the job, over all its tasks."""
    return sum(task.replicas for task in spec.tasks)


def may_grow(spec: JobSpec) -> bool:
    """Whether the job may start with fewer replicas than it asks for and grow later: a
    non-strict gang of one job whose ``min_member`` is below its replicas."""
    gang = spec.gang
    return (
        gang is not None
        and gang.mode is GangMode.NON_STRICT
        and gang.name is None
        and gang.min_member is not None
        and gang.min_member < wanted_replicas(spec)
    )


def label(spec: JobSpec) -> str:
    """How reasons name a gang: its ``gang.name`` (one that spans jobs), else the job's name."""
    return (spec.gang.name if spec.gang is not None else None) or spec.name


def fails_with(spec: JobSpec) -> str | None:
    """The named gang whose waiting members time out together: when one member's
    ``gang.timeout`` passes, every member still waiting fails with it (the gang can no longer
    be whole). None: a gang of one job, which times out alone."""
    gang = spec.gang
    return gang.name if gang is not None and gang.name else None


def timeout_reason(spec: JobSpec, last: str | None) -> str:
    """Why a queued gang failed: it could not be placed within its timeout, and the last
    reason it waited for."""
    assert spec.gang is not None
    return (
        f"gang {label(spec)} could not be placed within its timeout of {spec.gang.timeout:g}s: "
        f"{last or 'never considered'}"
    )


def members_wait_reason(placed: int, wanted: int, why: str) -> str:
    """Why a running non-strict gang has members still to place."""
    return f"{placed} of {wanted} replicas placed; the rest wait: {why}"


def growth_reason(added: int, placed: int, wanted: int, cluster: str) -> str:
    """The reason of the ``expanded`` event of a running non-strict gang that took more
    replicas."""
    return (
        f"grew by {added} replica{'s' if added != 1 else ''} to {placed} of {wanted} on {cluster}"
    )
