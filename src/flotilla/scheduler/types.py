"""Re-exports of the run's inputs and results, which live in ``flotilla.framework.snapshot``."""

from flotilla.framework.snapshot import (
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
