"""The local backend alone: how long starting one run with many replicas takes.

``python3 -m uv run python -m bench.local_replicas [--sleep S] [--run-as USER] [N ...]``: for
each N (default 250 500 1000), dispatch one run of N replicas of ``true`` (``--sleep S``: of
``sleep S``; ``--run-as USER``: as that account, the backend's ``run_as``, as a run with an
identity of its own starts) on a fresh state dir, then wait until it is terminal. Prints, from
the dispatch call: when it returned, when the run was ``running`` (every supervisor on record,
the gate open), when every replica's command had started (its pid known), and when the run
was terminal; the time per replica to start; and the CPU time of the whole (this process, the
supervisors and the commands they reaped), less dependent on the machine's load than the wall
clock. A linear start keeps the time per replica flat as N grows (issue 23: a record rewrite
per replica made N=10,000 take hours, then an interpreter per replica minutes).
"""

from __future__ import annotations

import argparse
import os
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


def start_replicas(
    replicas: int, sleep: float | None, run_as: str | None = None
) -> dict[str, float]:
    """Seconds from the dispatch call to each milestone of one run of ``replicas``."""
    with tempfile.TemporaryDirectory() as tmp:
        backend = LocalBackend(
            cluster="bench", state_dir=Path(tmp) / "state", grace_period=5, run_as=run_as
        )
        node = backend.inventory().nodes[0].name
        placements = tuple(ReplicaPlacement("main", index, node) for index in range(replicas))
        command = ["true"] if sleep is None else ["sleep", f"{sleep:g}"]
        marks: dict[str, float] = {}
        before = os.times()
        try:
            began = time.perf_counter()
            backend.dispatch(
                DispatchRequest("run-1", "job-1", "bench", placements, {"command": command})
            )
            marks["dispatch returned"] = time.perf_counter() - began
            while True:
                status = backend.status(StatusRequest("run-1"))
                now = time.perf_counter() - began
                if status.state is not BackendRunState.PENDING:
                    marks.setdefault("running", now)
                if all(replica.process_id for replica in status.replicas):
                    marks.setdefault("all started", now)
                if status.state.terminal:
                    marks["terminal"] = now
                    break
                time.sleep(0.05 + replicas / 50_000)  # a status of 10,000 is costly
        finally:
            if "terminal" not in marks:
                backend.cancel(CancelRequest("run-1"))
            backend.stop_runs_on_close = True
            backend.close()
    after = os.times()
    # CPU of this process and of every process it reaped (the supervisors, and below them the
    # commands they reaped): less dependent on the machine's load than the wall clock.
    marks["cpu"] = sum(after[:4]) - sum(before[:4])
    return marks


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.local_replicas")
    parser.add_argument("replicas", nargs="*", type=int, default=[250, 500, 1000])
    parser.add_argument("--sleep", type=float, default=None, help="run `sleep S`, not `true`")
    parser.add_argument("--run-as", default=None, help="the account the commands run as")
    arguments = parser.parse_args()
    for replicas in arguments.replicas:
        marks = start_replicas(replicas, arguments.sleep, arguments.run_as)
        started = marks.get("all started", float("nan"))
        print(
            f"{replicas:>6} replicas: dispatch returned {marks['dispatch returned']:6.2f} s, "
            f"running {marks.get('running', float('nan')):6.2f} s, all started {started:6.2f} s "
            f"({started / replicas * 1e3:5.2f} ms per replica), "
            f"terminal {marks['terminal']:6.2f} s; CPU {marks['cpu']:6.2f} s "
            f"({marks['cpu'] / replicas * 1e3:5.2f} ms per replica)",
            flush=True,
        )


if __name__ == "__main__":
    main()
