"""A run's GPU use as measured where it ran: what ``describe``, ``usage`` and ``/metrics``
show, and what a backend reports in ``RunStatus.gpu`` (the local backend's sampler is
``backends/local/gpu_telemetry.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GpuUse:
    """A run's GPU use so far (bytes, percent, GPU-seconds; ``sampled_at`` epoch seconds)."""

    memory_used: int = 0
    memory_peak: int = 0
    utilization: float | None = None
    held_gpu_seconds: float = 0.0
    used_gpu_seconds: float = 0.0
    sampled_at: float | None = None
    samples: int = 0
    utilization_shared: bool = False
    """``utilization`` is its part of a device's one figure, split with other processes by
    the GPU memory held (NVML gave no per-process figure there), not its processes' own."""

    @property
    def efficiency(self) -> float | None:
        """GPU-seconds used over GPU-seconds held (``None`` before any time was held)."""
        if self.held_gpu_seconds <= 0:
            return None
        return self.used_gpu_seconds / self.held_gpu_seconds

    def to_json(self) -> dict[str, Any]:
        return {
            "memory_used": self.memory_used,
            "memory_peak": self.memory_peak,
            "utilization": self.utilization,
            "held_gpu_seconds": self.held_gpu_seconds,
            "used_gpu_seconds": self.used_gpu_seconds,
            "sampled_at": self.sampled_at,
            "samples": self.samples,
            "utilization_shared": self.utilization_shared,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GpuUse:
        return cls(
            memory_used=int(data.get("memory_used", 0)),
            memory_peak=int(data.get("memory_peak", 0)),
            utilization=data.get("utilization"),
            held_gpu_seconds=float(data.get("held_gpu_seconds", 0.0)),
            used_gpu_seconds=float(data.get("used_gpu_seconds", 0.0)),
            sampled_at=data.get("sampled_at"),
            samples=int(data.get("samples", 0)),
            utilization_shared=bool(data.get("utilization_shared", False)),
        )
