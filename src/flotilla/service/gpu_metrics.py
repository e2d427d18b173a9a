"""Runs' GPU use as Prometheus metrics, per cluster and queue (issue 26).

Fed by every poll's ``RunStatus.gpu`` (``transitions.py``): counters of GPU-seconds held and
used (their rates' ratio is the GPU efficiency, like ``seff``), and the GPU memory the active
runs hold now. Labels are cluster and queue only, never a run or a job, so the series stay
as few as clusters × queues. A run's last figures are kept here while it is active, to add
only what grew since, and forgotten when it ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from flotilla.backends import RunStatus
from flotilla.model.gpu_use import GpuUse
from flotilla.service.metrics import SchedulerMetrics


@dataclass(frozen=True)
class _Seen:
    cluster: str
    queue: str
    use: GpuUse


class GpuUseMetrics:
    def __init__(self, metrics: SchedulerMetrics) -> None:
        self._metrics = metrics
        self._runs: dict[str, _Seen] = {}
        """Active run → its cluster, queue and figures at the last report."""
        self._series: set[tuple[str, str]] = set()

    def observe(self, statuses: Sequence[RunStatus], queue_of: Callable[[str], str | None]) -> None:
        """Add what each reported run's GPU use grew by; ``queue_of`` maps a job id to its
        queue (None: unknown job, not counted)."""
        for status in statuses:
            use = status.gpu
            if use is not None:
                seen = self._runs.get(status.run_id)
                queue = seen.queue if seen is not None else queue_of(status.job)
                if queue is not None:
                    before = seen.use if seen is not None else GpuUse()
                    labels = {"cluster": status.cluster, "queue": queue}
                    held = use.held_gpu_seconds - before.held_gpu_seconds
                    used = use.used_gpu_seconds - before.used_gpu_seconds
                    self._metrics.gpu_held_seconds.labels(**labels).inc(max(0.0, held))
                    self._metrics.gpu_used_seconds.labels(**labels).inc(max(0.0, used))
                    self._runs[status.run_id] = _Seen(status.cluster, queue, use)
                    self._series.add((status.cluster, queue))
            if status.state.terminal:
                self._runs.pop(status.run_id, None)
        memory: dict[tuple[str, str], int] = {}
        for seen in self._runs.values():
            key = (seen.cluster, seen.queue)
            memory[key] = memory.get(key, 0) + seen.use.memory_used
        for cluster, queue in self._series:
            self._metrics.gpu_memory_used.labels(cluster=cluster, queue=queue).set(
                memory.get((cluster, queue), 0)
            )
