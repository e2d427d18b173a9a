"""The contract harness over a real Ray head (the session's ``ray_head``).

Each test is its own Flotilla cluster on the shared head, so the contract's fixed run ids
(``run-1``…) repeat across tests without meeting each other's Ray jobs.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from flotilla.backends import Backend, LogStream, RunStatus
from flotilla.backends.ray import RayBackend
from flotilla.backends.ray.client import RayJobsClient
from flotilla.backends.ray.jobs import Marker
from tests.timing import wait_until

from .engines.ray_head import RayHead
from .support import Harness, run_processes

RAY_WAIT_LIMIT = 90.0
"""A Ray job takes about 4 s from submit to running on an idle machine (its runtime env is set
up first), much longer on a loaded one, and the limit is stretched there (``tests/timing.py``);
reaching it fails the test."""


class RayHarness(Harness):
    name = "ray"
    starts_cancelled_pending_runs = True
    wait_limit = RAY_WAIT_LIMIT
    error_stream = LogStream.STDOUT
    """Ray keeps one log of both streams, served as stdout (its stderr is empty)."""

    def __init__(self, state_dir: Path, scratch: Path, head: RayHead) -> None:
        super().__init__(state_dir, scratch)
        self.head = head
        self.cluster_name = f"ray-{uuid.uuid4().hex[:8]}"

    def settings(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster_name,
            "address": self.head.address,
            "grace_period": 2.0,
        }

    def construct(self, settings: dict[str, Any]) -> Backend:
        return RayBackend(**settings)

    def close_all(self) -> None:
        super().close_all()
        # Safety net: a test that failed half-way must leave no job of its cluster running.
        client = RayJobsClient(self.head.address, None, 10.0)
        for details in client.jobs():
            marker = Marker.from_metadata(getattr(details, "metadata", None))
            mine = marker is not None and marker.cluster == self.cluster_name
            if mine and not details.status.is_terminal():
                client.stop(details.submission_id)

    def pass_time(self) -> None:
        time.sleep(0.2)

    def assert_gone(self, status: RunStatus) -> None:
        wait_until(
            lambda: not run_processes(status.run_id, self.cluster_name),
            lambda: (
                f"the processes of {status.run_id} to end: "
                f"{run_processes(status.run_id, self.cluster_name)}"
            ),
            10.0,
            interval=0.1,
        )
