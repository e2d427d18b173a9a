"""Where the wall time of submit → scheduled goes, per thread:
``python -m bench.service_timeline --database postgresql`` (or ``sqlite``).

Runs ``bench.service.run_submit_to_scheduled`` (the ``service-throughput`` cases: API and loop
in one process) with a clock around each ``SqlStore`` call, each loop cycle, each scheduling
round and each pause of the round for urgent work (``Precedence.checkpoint``), and prints, per
thread, the wall time each spent inside the measured window, then the timeline of the long
calls. Wrapping costs a few microseconds a call, so the figures are the service's own.
"""

from __future__ import annotations

import argparse
import functools
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from bench.service import run_submit_to_scheduled
from flotilla.scheduler.algorithm import SchedulingAlgorithm
from flotilla.scheduler.precedence import Precedence
from flotilla.service.loop import SchedulingLoop
from flotilla.store import SqlStore

Span = tuple[str, str, float, float]
"""Thread, what, start, end (``time.perf_counter``)."""

STORE_CALLS = (
    "submit_jobs",
    "jobs_since",
    "commit_cycle",
    "transition_many",
    "record_runs",
    "renew_lease",
    "job_counts",
    "get_job",
    "list_clusters",
    "list_queues",
    "list_quotas",
    "heartbeat",
    "fleet_version",
)


def _clocked(spans: list[Span], label: str, call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def clocked(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            spans.append((threading.current_thread().name, label, started, time.perf_counter()))

    return clocked


def _paused(spans: list[Span], checkpoint: Callable[[Precedence], None]) -> Callable[..., None]:
    def paused(self: Precedence) -> None:
        if not self.pending:
            return
        started = time.perf_counter()
        checkpoint(self)
        ended = time.perf_counter()
        if ended - started > 1e-4:
            spans.append((threading.current_thread().name, "round paused", started, ended))

    return paused


def measure(database: str) -> tuple[dict[str, Any], list[Span]]:
    spans: list[Span] = []
    patched: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, replacement: Any) -> None:
        patched.append((owner, name, getattr(owner, name)))
        setattr(owner, name, replacement)

    for name in STORE_CALLS:
        patch(SqlStore, name, _clocked(spans, name, getattr(SqlStore, name)))
    patch(SchedulingLoop, "cycle", _clocked(spans, "cycle", SchedulingLoop.cycle))
    patch(SchedulingAlgorithm, "schedule", _clocked(spans, "round", SchedulingAlgorithm.schedule))
    patch(Precedence, "checkpoint", _paused(spans, Precedence.checkpoint))
    try:
        result = run_submit_to_scheduled(database=database)
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)
    return result, spans


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.service_timeline")
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="postgresql")
    database = parser.parse_args().database
    load = os.getloadavg()[0]
    result, spans = measure(database)
    start = min(begun for _, name, begun, _ in spans if name == "submit_jobs")
    end = start + result["submit_to_scheduled_seconds"]
    print(
        f"{database}: submit {result['submit_jobs_per_s']:,.0f} jobs/s, submit → scheduled "
        f"{result['submit_to_scheduled_jobs_per_s']:,.0f} jobs/s; load average {load:.1f} at "
        f"start, {os.getloadavg()[0]:.1f} at end"
    )
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for thread, name, begun, ended in spans:
        if ended >= start and begun <= end:
            totals[(thread, name)][0] += 1
            totals[(thread, name)][1] += min(ended, end) - max(begun, start)
    for (thread, name), (count, seconds) in sorted(totals.items(), key=lambda item: -item[1][1]):
        print(f"  {thread[:24]:24} {name:16} {int(count):4} × {seconds * 1000:7.0f} ms")
    print("timeline (s after the first submission; calls over 5 ms):")
    for thread, name, begun, ended in sorted(spans, key=lambda span: span[2]):
        if start - 0.01 <= begun <= end and ended - begun > 0.005 and name != "job_counts":
            print(f"  {begun - start:6.3f} → {ended - start:6.3f}  {thread[:24]:24} {name}")


if __name__ == "__main__":
    main()
