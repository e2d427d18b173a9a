"""The scheduling cycle: one algorithm, driven by the simulator and (later) the service."""

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
