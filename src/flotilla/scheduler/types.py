"""Re-exports of the round's inputs and results, which live in ``flotilla.framework.snapshot``."""

from flotilla.framework.snapshot import (
    BacklogView,
    CycleResult,
    CycleStats,
    Eviction,
    PendingReasons,
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
    "Eviction",
    "PendingReasons",
    "QueueInfo",
    "RunningJob",
    "ScheduledJob",
    "SchedulingConfig",
    "SchedulingSnapshot",
]
