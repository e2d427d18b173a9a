"""A run's start and end as its engine saw them, for the transitions that record them.

The loop may learn of a run's end long after it happened: the run ended while no scheduler
was up (a restart, a failover), or between two polls far apart. Stamping the store's time then
counted the outage as used hours (``usage``: 45 s jobs read 63 s). Every backend reports its
engine's times (the local supervisor's exit file, Slurm's ``Start``/``End``, Ray's
``start_time``/``end_time``, the pods' ``startedAt``/``finishedAt``); the store keeps them
within the run's start and its own now (``store/cycle.py`` ``end_run``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime

from flotilla.backends.interface import RunStatus
from flotilla.store import Transition


def _moment(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def with_engine_times(changes: Iterable[Transition], status: RunStatus) -> list[Transition]:
    """``changes`` about ``status``'s run, carrying the engine's start and end times."""
    started, finished = _moment(status.started_at), _moment(status.finished_at)
    if started is None and finished is None:
        return list(changes)
    return [
        replace(change, started_at=started, finished_at=finished)
        if change.run == status.run_id
        else change
        for change in changes
    ]
