"""What a run's processes used of the CPU and memory, as measured where it ran: what a backend
reports with a run's end (``RunStatus.resources``), the store keeps on the run (``runs.
cpu_seconds``, ``runs.memory_peak``, migration 0011) and ``flotilla sacct`` shows.

The local backend reads each replica's cgroup when the replica ends (``cgroups.py``), Slurm's
accounting gives ``TotalCPU`` and ``MaxRSS`` (``backends/slurm/accounting.py``); Ray's Jobs
API and a pod's status say neither, so their runs have none (shown as ``-``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class RunResources:
    """CPU seconds (user + system) used, and peak resident memory in bytes; ``None``: not
    measured."""

    cpu_seconds: float | None = None
    memory_peak: int | None = None

    @property
    def measured(self) -> bool:
        return self.cpu_seconds is not None or self.memory_peak is not None

    @classmethod
    def of_replicas(cls, replicas: Iterable[RunResources]) -> RunResources:
        """A run's figures from its replicas': CPU seconds summed (Slurm's ``TotalCPU``), the
        largest single peak (Slurm's ``MaxRSS``, the most one task held at once). A figure
        is ``None`` when no replica measured it."""
        measured = list(replicas)
        cpu = [r.cpu_seconds for r in measured if r.cpu_seconds is not None]
        memory = [r.memory_peak for r in measured if r.memory_peak is not None]
        return cls(sum(cpu) if cpu else None, max(memory) if memory else None)
