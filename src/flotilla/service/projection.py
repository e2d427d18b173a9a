"""The service's projection: an estimated start for every waiting job, kept in the background.

A thread of its own asks a long-lived child process at a low CPU priority to export the live
fleet and workload (``whatif/export.py``, from a store connection of the child's own) and to
simulate it (``whatif/project.py``); the thread only waits for the answer. So the scheduling
loop never waits for a projection, and neither the export's reads nor the simulation hold the
loop's interpreter. It
recomputes every ``interval`` seconds, and sooner — but at most once every ``min_gap`` —
when at least ``change_threshold`` writes (submissions, state changes) reached the store
since the last one. The API reads the latest answer (``estimated_start``); a job submitted
since has none until the next projection.

Self-contained: ``start()`` and ``stop()``, nothing else of the service calls into it.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from flotilla.model.scenario import RuntimeEstimate, Settings
from flotilla.store import Store
from flotilla.whatif.estimator import EstimatorMethod
from flotilla.whatif.project import StoreProjection, StoreProjectionInput, project_store

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
SIGKILL = 9


def _worker_setup(nice: int) -> Callable[[], None]:
    """What the worker runs between fork and exec: it dies with the thread that made it
    (``PR_SET_PDEATHSIG``), so a ``kill -9`` of the service leaves no worker behind (one did:
    a worker still importing the engine, or stopped, never read the end of its input), and it
    takes its low CPU priority. libc is loaded here, in the parent: the child only calls it."""
    parent = os.getpid()
    try:
        prctl: Callable[..., int] | None = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the worker still ends at its input's end
        prctl = None

    def setup() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the service died before the request took hold
                os._exit(1)
        if nice:
            os.nice(nice)

    return setup


@dataclass(frozen=True)
class ProjectionSettings:
    interval: float = 60.0
    """Seconds between projections at most."""
    min_gap: float = 5.0
    """Seconds between projections at least."""
    change_threshold: int = 50
    """Store writes since the last projection that make the next one come sooner."""
    horizon: float = 7 * 86400.0
    """Seconds the simulation looks ahead; a job not started by then has no estimate."""
    methods: tuple[EstimatorMethod, ...] = (EstimatorMethod.AUTO,)
    """Runtime estimators to project with; the first is the one shown, all are in the API."""
    max_waiting: int = 20_000
    """Waiting jobs projected at most (the first in submission order); later ones have no
    estimate: the export and the simulation grow with the backlog."""
    in_process: bool = False
    """Simulate on this thread instead of a child process (tests)."""
    nice: int = 10


@dataclass(frozen=True)
class EstimatedStart:
    """A waiting job's expected start in one projection, and what it rests on."""

    job_id: str
    projected_at: datetime
    """When the projection's export was taken."""
    start: datetime | None
    """None: not within the projection's horizon."""
    horizon: float
    method: EstimatorMethod
    basis: str
    """The runtimes it assumed, in words: ``runtimes from history``, ``from max_runtime``…"""
    runtime: RuntimeEstimate
    """This job's own expected runtime."""
    others: Mapping[str, datetime | None] = field(default_factory=dict)
    """The start projected with each other method, by method name."""


@dataclass(frozen=True)
class ProjectedFleet:
    """One projection's answer for every waiting job it saw."""

    projected_at: datetime
    basis: dict[str, str]
    """By method: the runtimes it assumed, in words."""
    starts: dict[str, dict[str, datetime | None]]
    """By method, job id → expected start (None: not within the horizon)."""


@dataclass(frozen=True)
class _Round:
    at: datetime
    starts: dict[EstimatorMethod, dict[str, float | None]]
    basis: dict[EstimatorMethod, str]
    runtimes: dict[str, RuntimeEstimate]


class Projection:
    def __init__(
        self,
        store: Store,
        settings: ProjectionSettings | None = None,
        scheduling: Settings | None = None,
        pace: Callable[[], None] | None = None,
        database: str | None = None,
    ) -> None:
        self.store = store
        self.settings = settings or ProjectionSettings()
        self.scheduling = scheduling
        """Scheduling settings when no fleet file is in force (``flotilla up``'s own)."""
        self.pace = pace or (lambda: None)
        """Called between the export's reads: the loop's ``Precedence.pace`` in a service."""
        self.database = database
        """The store's URL: the child process opens a connection of its own and reads the
        store there; None: the export runs on the projection's thread (tests)."""
        self._latest: _Round | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0
        self.last_seconds = 0.0
        self._child: subprocess.Popen[str] | None = None

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="flotilla-projection", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop at once: a simulation under way is ended with its child process. The flag is
        set before the child is looked at, and ``_worker`` looks at the flag after it made a
        child, so a child started while stopping is ended by one of them (it was not: a
        ``flotilla up`` stopped while its first worker was importing waited for the join's
        and the worker's timeouts, 40 s)."""
        self._stop.set()
        child = self._child
        if child is not None and child.poll() is None:
            child.terminate()  # a long simulation must not hold up the service's shutdown
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._end_worker()

    def _run(self) -> None:
        last = float("-inf")
        serial = -1
        while not self._stop.is_set():
            try:
                now_serial = self.store.latest_serial()
                due = time.monotonic() - last >= self.settings.interval
                changed = now_serial - serial >= self.settings.change_threshold
                if due or changed:
                    serial = now_serial
                    last = time.monotonic()
                    self.refresh()
            except Exception:  # the projection is advice: it must never stop the service
                if self._stop.is_set():
                    return
                log.exception("the projection failed; trying again later")
                last = time.monotonic()
            self._stop.wait(min(self.settings.min_gap, self.settings.interval))

    # --- one projection ---------------------------------------------------------------------

    def refresh(self) -> None:
        """Project now: in the child process when the store's URL is known (it reads the
        store itself), else on the calling thread (tests)."""
        started = time.perf_counter()
        at = datetime.now(UTC)
        if self.database is None or self.settings.in_process:
            answer = project_store(
                StoreProjectionInput(
                    self.store,
                    at,
                    self.settings.methods,
                    self.settings.horizon,
                    self.scheduling,
                    self.settings.max_waiting,
                    self.pace,
                )
            )
        else:
            answer = self._in_child(at)
        self._latest = _Round(
            at,
            {EstimatorMethod(name): found for name, found in answer.starts.items()},
            {EstimatorMethod(name): words for name, words in answer.basis.items()},
            answer.runtimes,
        )
        self.rounds += 1
        self.last_seconds = time.perf_counter() - started

    def _in_child(self, at: datetime) -> StoreProjection:
        request = {
            "db": self.database,
            "now": at.isoformat(),
            "methods": [method.value for method in self.settings.methods],
            "horizon": self.settings.horizon,
            "settings": None
            if self.scheduling is None
            else self.scheduling.model_dump(mode="json"),
            "max_waiting": self.settings.max_waiting,
        }
        worker = self._worker()
        assert worker.stdin is not None and worker.stdout is not None
        try:
            worker.stdin.write(json.dumps(request) + "\n")
            worker.stdin.flush()
            line = worker.stdout.readline()
        except OSError:
            line = ""
        if not line:
            self._end_worker()
            raise RuntimeError("the projection worker ended")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the projection failed: {answer['error']}")
        return StoreProjection(
            starts=answer["starts"],
            basis=answer["basis"],
            runtimes={
                job_id: RuntimeEstimate.model_validate(found)
                for job_id, found in answer["runtimes"].items()
            },
        )

    def _worker(self) -> subprocess.Popen[str]:
        """The child process that simulates (started on first use, and again after it
        ended): it imports the engine once, runs at a low CPU priority."""
        if self._child is not None and self._child.poll() is None:
            return self._child
        self._child = child = subprocess.Popen(
            [sys.executable, "-m", "flotilla.whatif.project"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=_worker_setup(self.settings.nice),
        )
        if self._stop.is_set():  # stop() came while it was being made: see stop()
            child.terminate()
        return child

    def _end_worker(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        if child.stdin is not None:
            child.stdin.close()  # its input ends: it exits
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()

    # --- answers ----------------------------------------------------------------------------

    def projected_at(self) -> datetime | None:
        """When the latest projection's export was taken; None before the first."""
        latest = self._latest
        return None if latest is None else latest.at

    def all_starts(self) -> ProjectedFleet | None:
        """Every waiting job's projected start in the latest projection, per method."""
        latest = self._latest
        if latest is None:
            return None
        return ProjectedFleet(
            projected_at=latest.at,
            basis={method.value: words for method, words in latest.basis.items()},
            starts={
                method.value: {
                    job_id: None if seconds is None else latest.at + timedelta(seconds=seconds)
                    for job_id, seconds in found.items()
                }
                for method, found in latest.starts.items()
            },
        )

    def estimated_start(self, job_id: str) -> EstimatedStart | None:
        """The latest projection's answer for a waiting job; None when it was not in it."""
        latest = self._latest
        if latest is None:
            return None
        method = self.settings.methods[0]
        if job_id not in latest.starts.get(method, {}):
            return None

        def moment(found: Mapping[str, float | None]) -> datetime | None:
            seconds = found.get(job_id)
            return None if seconds is None else latest.at + timedelta(seconds=seconds)

        return EstimatedStart(
            job_id=job_id,
            projected_at=latest.at,
            start=moment(latest.starts[method]),
            horizon=self.settings.horizon,
            method=method,
            basis=latest.basis[method],
            runtime=latest.runtimes.get(job_id, RuntimeEstimate()),
            others={
                other.value: moment(latest.starts[other])
                for other in self.settings.methods[1:]
                if job_id in latest.starts[other]
            },
        )
