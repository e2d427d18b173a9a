"""The local backend alone: how long after ``cancel`` its ``status`` reports the run ended.

``python3 -m uv run python -m bench.local_cancel [N]``: dispatch ``sleep 600``, cancel it,
ask ``status`` every millisecond until it is terminal; N runs (default 30), p50/p90/max in ms.
The service's own trace (``--case service-cancel``) shows the same step as "backend-signalled
→ exit-observed", plus the loop's 5 ms status requests and its waits for a CPU.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from flotilla.backends import (
    BackendRunState,
    CancelRequest,
    DispatchRequest,
    ReplicaPlacement,
    StatusRequest,
)
from flotilla.backends.local.backend import LocalBackend

ACTIVE = (BackendRunState.PENDING, BackendRunState.RUNNING)


def cancel_to_ended(runs: int) -> list[float]:
    """Milliseconds from ``cancel`` to a terminal ``status``, one per run, sorted."""
    gaps: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        backend = LocalBackend(cluster="bench", state_dir=Path(tmp) / "state")
        node = backend.inventory().nodes[0].name
        try:
            for index in range(runs):
                run_id = f"run-{index}"
                placement = (ReplicaPlacement("main", 0, node),)
                payload = {"command": "sleep 600"}
                backend.dispatch(
                    DispatchRequest(run_id, f"job-{index}", "bench", placement, payload)
                )
                time.sleep(0.15)  # the command has started
                started = time.perf_counter()
                backend.cancel(CancelRequest(run_id, reason="bench"))
                while backend.status(StatusRequest(run_id)).state in ACTIVE:
                    time.sleep(0.001)
                gaps.append((time.perf_counter() - started) * 1e3)
        finally:
            backend.close()
    return sorted(gaps)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    gaps = cancel_to_ended(runs)
    p50, p90 = gaps[len(gaps) // 2], gaps[int(len(gaps) * 0.9)]
    slowest = gaps[-1]
    print(f"cancel → ended, {runs} runs: p50 {p50:.1f} ms, p90 {p90:.1f} ms, max {slowest:.1f} ms")


if __name__ == "__main__":
    main()
