"""The local backend's GPU sampler: a thread of its own, off the monitor thread that enforces
``max_runtime`` and reaps runs, so a slow or failing NVML holds up neither.

Every ``interval`` seconds it asks the backend what to sample (``collect``: the running runs
that hold GPUs, with every process of each), reads the source once (``gpu_telemetry``), and
hands the result back (``apply``: the runs' use, and the ``monitor`` stops). Whatever goes
wrong in a round — NVML failing, the binding raising something else (its library-mismatch
error on an older driver), a bug — is contained: the round is skipped, and the error logged
once (the same error again is not logged until another has been, or a round succeeded).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from flotilla.backends.local.gpu_sources import GpuSource
from flotilla.backends.local.gpu_telemetry import Sample, SampleRequest, sample_gpus

log = logging.getLogger(__name__)


@dataclass
class GpuSampler:
    """Samples ``source`` every ``interval`` seconds until ``close`` (which also lets go of the
    source: NVML is initialised once per backend and shut down here)."""

    name: str
    source: GpuSource
    interval: float
    collect: Callable[[], SampleRequest | None]
    apply: Callable[[Sample], None]
    errors: list[str] = field(default_factory=list)
    """Every distinct error reported, in order (what was logged)."""
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _last_error: str | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-gpus", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            self.sample_once()

    def sample_once(self) -> None:
        """One round; never raises."""
        try:
            request = self.collect()
            if request is None or not request.runs:
                return
            sample = sample_gpus(self.source, request)
            if sample.error is not None:
                self._report(f"GPU sample failed: {sample.error}")
                return
            self.apply(sample)
            self._last_error = None
        except Exception as error:  # contained: the sampler goes on
            self._report(f"GPU sampler error: {type(error).__name__}: {error}")

    def _report(self, message: str) -> None:
        if message == self._last_error:
            return
        self._last_error = message
        self.errors.append(message)
        log.warning("%s: %s", self.name, message)

    def close(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self.source.close()
        except Exception as error:  # the backend closes whatever happens
            self._report(f"GPU source did not close: {error}")
