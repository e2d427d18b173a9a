"""A real Flotilla service in the test process: SQLite store, the real scheduling loop on its
own thread, the local backend running real processes, and the real API app over them.

For API and CLI tests whose subject is what the service does (why a job waits, its logs, a
cancel that stops a process, ``wait``/``watch``/``logs -f``), not what a fake says it does.
The service is built by the composition root as ``flotilla up`` builds it (``flotilla.app``),
only with a short cycle and a local backend that stops its runs when closed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from flotilla.backends.local.backend import LocalBackend
from flotilla.model import JobSpec
from flotilla.service.loop import LoopSettings, SchedulingLoop
from flotilla.store import JobState, SqlStore
from tests.service_builders import TEST_API, service_over
from tests.timing import wait_until

CYCLE = 0.05


def local_backend(root: Path) -> LocalBackend:
    """This machine as cluster ``local`` (real processes), its runs under ``root``."""
    return LocalBackend(
        cluster="local",
        state_dir=root / "runs",
        grace_period=1.0,
        stop_runs_on_close=True,
        any_working_dir=True,  # as `flotilla up`'s own: the CLI sends the submit directory
    )


def local_loop(root: Path, settings: LoopSettings) -> tuple[SqlStore, LocalBackend, SchedulingLoop]:
    """A SQLite store under ``root`` with this machine as cluster ``local`` (real processes)
    and a ``default`` queue, and the scheduling loop over them, as the composition root
    builds them (not started: the test cycles it)."""
    backend = local_backend(root)
    service = service_over({"local": backend}, root=root, settings=settings)
    return service.store, backend, service.loop


class LiveService:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.backend = local_backend(root)
        self.service = service_over(
            {"local": self.backend}, root=root, api=TEST_API, cycle_interval=CYCLE, replica="live"
        )
        self.store, self.loop = self.service.store, self.service.loop
        self.app: FastAPI = self.service.app()
        self.service.start()

    @property
    def cpus(self) -> float:
        """The local cluster's cores: what a job must exceed never to fit."""
        return float(self.backend.inventory().nodes[0].capacity["cpu"])

    def spec(
        self, name: str, command: str, cpu: float = 0.1, hold_if_unfit: bool = False
    ) -> dict[str, Any]:
        """A job of ``command``; ``hold_if_unfit`` keeps one too big for the machine queued
        (the server refuses it otherwise)."""
        return {
            "name": name,
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": cpu}}],
            "payload": {"command": ["sh", "-c", command]},
            "hold_if_unfit": hold_if_unfit,
        }

    def submit(self, name: str, command: str, cpu: float = 0.1) -> str:
        job_id = self.store.submit_jobs([JobSpec.model_validate(self.spec(name, command, cpu))])[0]
        self.loop.wake()
        return job_id

    def state(self, job_id: str) -> JobState:
        return self.store.get_job(job_id).state

    def wait_until(self, done: Callable[[], bool], what: str, limit: float = 30.0) -> None:
        """Until ``done``; ``limit`` seconds on the reference machine (``tests/timing.py``)."""
        wait_until(done, what, limit, interval=0.05)

    def close(self) -> None:
        self.service.stop()
        self.backend.close()


@contextmanager
def live_service(root: Path) -> Iterator[LiveService]:
    service = LiveService(root)
    try:
        yield service
    finally:
        service.close()


def process_gone(pid: int) -> bool:
    """True once ``pid`` no longer runs: no such process, or a zombie left to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def read_pids(path: Path) -> list[int]:
    return [int(word) for word in path.read_text().split()] if path.exists() else []


def sleeper_writing_pids(path: Path) -> str:
    """A shell command that starts a child ``sleep 600``, appends its own and the child's pid
    to ``path`` and waits. The pids as the server sees them: a local job runs in a PID
    namespace of its own, where ``$$`` and ``$!`` are its own small numbers, while ``/proc``
    is the server's (``/proc/self/stat`` starts with the server's pid)."""
    mine = f"read -r pid _ </proc/self/stat; echo $pid >> {path}"
    return f"sh -c '{mine}; exec sleep 600' & {mine}; wait"
