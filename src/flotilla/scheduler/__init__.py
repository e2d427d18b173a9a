"""The engine: the scheduling algorithm, one round over a snapshot at a time, driven by the
simulator and by the service loop (``flotilla.service``)."""

from flotilla.scheduler.algorithm import SchedulingAlgorithm
from flotilla.scheduler.types import (
    BacklogView,
    CycleResult,
    CycleStats,
    QueueInfo,
    RunningJob,
    ScheduledJob,
    SchedulingConfig,
    SchedulingSnapshot,
)

__all__ = [
    "BacklogView",
    "CycleResult",
    "CycleStats",
    "QueueInfo",
    "RunningJob",
    "ScheduledJob",
    "SchedulingAlgorithm",
    "SchedulingConfig",
    "SchedulingSnapshot",
]
