"""The local backend alone: how long ``dispatch`` of one run with many replicas takes.

``python3 -m uv run python -m bench.local_replicas [N ...]``: for each N (default 250 500
1000), dispatch one run of N replicas of ``true`` on a fresh state dir, then wait until it
is terminal; prints the dispatch time, the time per replica and the time to the end. A linear
dispatch keeps the time per replica flat as N grows (issue 23: it used to rewrite the run's
record once per replica start, so N=10,000 took minutes).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from flotilla.backends import DispatchRequest, ReplicaPlacement, StatusRequest
from flotilla.backends.local import LocalBackend


def dispatch_replicas(replicas: int) -> tuple[float, float]:
    """Seconds ``dispatch`` took, and seconds from its start until the run was terminal."""
    with tempfile.TemporaryDirectory() as tmp:
        backend = LocalBackend(cluster="bench", state_dir=Path(tmp) / "state")
        node = backend.inventory().nodes[0].name
        placements = tuple(ReplicaPlacement("main", index, node) for index in range(replicas))
        payload = {"command": ["true"]}
        try:
            started = time.perf_counter()
            backend.dispatch(DispatchRequest("run-1", "job-1", "bench", placements, payload))
            dispatched = time.perf_counter() - started
            while not backend.status(StatusRequest("run-1")).state.terminal:
                time.sleep(0.05)
            ended = time.perf_counter() - started
        finally:
            backend.close()
    return dispatched, ended


def main() -> None:
    sizes = [int(argument) for argument in sys.argv[1:]] or [250, 500, 1000]
    for replicas in sizes:
        dispatched, ended = dispatch_replicas(replicas)
        print(
            f"{replicas:>6} replicas: dispatch {dispatched:7.2f} s "
            f"({dispatched / replicas * 1e3:6.2f} ms per replica), terminal after {ended:7.2f} s"
        )


if __name__ == "__main__":
    main()
