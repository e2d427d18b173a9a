"""The live fleet over time: a sampler thread and a bounded ring of samples.

The API answers "now"; the dashboard's charts need "over the last minutes". Every
``interval`` seconds the sampler records the scheduler's last cycle (timings, decisions,
preemptions, leadership, async runner state), each queue's running/queued counts and dominant
share against its fair share, and each cluster's allocation per resource against its
capacity. Samples live in memory only (``capacity`` of them, oldest dropped): a restart starts
a new timeline, which is what a dashboard of a live process should show; the durable history
is the jobs' events.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from flotilla.service.handle import SchedulerHandle
from flotilla.store import Store
from flotilla.web.usage import FleetUsage, fleet_usage

log = logging.getLogger(__name__)


def sample_of(usage: FleetUsage, scheduler: SchedulerHandle | None, now: float) -> dict[str, Any]:
    """One point of the timeline: small, JSON-ready."""
    cycle: dict[str, Any] | None = None
    if scheduler is not None:
        report = scheduler.last_cycle()
        cycle = {
            "number": report.number,
            "seconds": report.seconds,
            "algorithm_seconds": report.algorithm_seconds,
            "leader": report.leader,
            "considered": report.considered,
            "scheduled": report.scheduled,
            "preempted": report.preempted,
            "runner_state": report.runner_state,
        }
    return {
        "time": round(now, 3),
        "cycle": cycle,
        "queues": {
            queue.name: {
                "running": queue.running,
                "queued": queue.queued,
                "share": round(queue.dominant_share, 4),
                "fair": round(queue.fair_share, 4),
                "allocated": queue.allocated,
            }
            for queue in usage.queues
        },
        "clusters": {
            cluster["name"]: {
                name: round(cluster["allocated"].get(name, 0.0) / amount, 4)
                for name, amount in cluster["capacity"].items()
                if amount > 0
            }
            for cluster in usage.clusters
        },
    }


IDLE_SHARE = 10
"""The sampler waits at least this many times as long as its last sample took, so it never
takes more than about a tenth of the interpreter."""


class Timeline:
    """Samples the fleet in a daemon thread; ``samples()`` is safe from any thread."""

    def __init__(
        self,
        store: Store,
        scheduler: SchedulerHandle | None,
        *,
        interval: float = 2.0,
        capacity: int = 1800,
        clock: Callable[[], float] = time.time,
        pace: Callable[[], None] = lambda: None,
    ) -> None:
        """``pace``: called between the jobs a sample walks (``Precedence.pace``)."""
        self.store = store
        self._pace = pace
        self.scheduler = scheduler
        self.interval = interval
        self._clock = clock
        self._samples: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> dict[str, Any]:
        """Take one sample now and keep it."""
        point = sample_of(fleet_usage(self.store, self._pace), self.scheduler, self._clock())
        with self._lock:
            self._samples.append(point)
        return point

    def samples(self, since: float | None = None) -> list[dict[str, Any]]:
        with self._lock:
            points = list(self._samples)
        if since is None:
            return points
        return [point for point in points if point["time"] > since]

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="flotilla-ui-timeline", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                self.sample()
            except Exception:  # a database hiccup must not end the timeline
                log.warning("dashboard timeline: sampling failed", exc_info=True)
            self._stop.wait(self.wait_after(time.perf_counter() - started))

    def wait_after(self, took: float) -> float:
        """How long to wait after a sample that took ``took`` seconds: ``interval``, or
        ``IDLE_SHARE`` times longer than the sample took, whichever is longer. A sample reads
        every active job; with thousands running it is most of a second of Python, and every
        two seconds it took a third of a core from the API and the scheduler
        (``docs/performance.md``, *Third pass*)."""
        return max(self.interval, took * IDLE_SHARE)
