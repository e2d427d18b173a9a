"""A service driven by a fleet: the service the composition root (``flotilla.app``) builds
over SQLite, its backends built from a fleet file by ``FleetRuntime`` (sim clusters here: fake
nodes and fake runs), and a fake remote backend that keeps its truth "in the engine" (an
object shared by every backend instance, as a Ray head or a Slurm controller is shared by
every replica)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from flotilla.app import Service, ServiceConfig, build_service
from flotilla.backends import (
    Backend,
    BackendRunState,
    BackendUnavailable,
    CancelOutcome,
    CancelRequest,
    CancelResult,
    DispatchRequest,
    DispatchResult,
    Inventory,
    LogChunk,
    LogsRequest,
    RunStatus,
    StatusRequest,
    UnknownRun,
    load_backend,
)
from flotilla.model import JobSpec
from flotilla.model.fleet import Fleet
from flotilla.model.fleet_loader import fleet_from_data
from flotilla.model.node_info import NodeInfo
from flotilla.service.engines import EngineSettings
from flotilla.service.fleet import FleetRuntime, fleet_change
from flotilla.service.loop import LoopSettings, SchedulingLoop
from flotilla.store import JobState, SqlStore
from tests.service_builders import TEST_API
from tests.timing import wait_until

Data = dict[str, Any]


def sim_cluster(name: str, *, cpu: float = 4, count: int = 1, **extra: Any) -> Data:
    return {
        "name": name,
        "backend": "sim",
        "nodes": [{"name": f"{name}-node", "count": count, "resources": {"cpu": cpu}}],
        **extra,
    }


def fleet_data(
    *clusters: Data,
    queues: list[Data] | None = None,
    priority_classes: list[Data] | None = None,
    **settings: Any,
) -> Data:
    return {
        "name": "test",
        "settings": {"cycle_interval": 0.05, **settings},
        "priority_classes": priority_classes or [],
        "clusters": list(clusters) or [sim_cluster("c1")],
        "queues": queues or [{"name": "default"}],
    }


def job(
    name: str,
    cpu: float = 1,
    *,
    queue: str = "default",
    priority: int = 0,
    duration: float = 1000,
    **extra: Any,
) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": name,
            "queue": queue,
            "priority": priority,
            "tasks": [{"name": "main", "resources": {"cpu": cpu}}],
            "payload": {"sim": {"duration": duration}},
            **extra,
        }
    )


class FleetService:
    """One replica: a store, and the service the composition root builds over the fleet it
    holds (``start``), whose loop the test cycles by hand."""

    def __init__(
        self,
        db: str,
        *,
        replica: str = "replica-a",
        factory: Callable[..., Backend] | None = None,
        heartbeat_timeout: float = 30.0,
    ) -> None:
        self.store = SqlStore.open(db)
        self.factory = factory
        self.replica = replica
        self.heartbeat_timeout = heartbeat_timeout
        self.service: Service | None = None
        self.loop: SchedulingLoop | None = None

    @property
    def runtime(self) -> FleetRuntime:
        """The fleet runtime that built the backends (once started)."""
        assert self.service is not None and self.service.runtime is not None, "not started"
        return self.service.runtime

    def apply(self, data: Data) -> Fleet:
        fleet = fleet_from_data(data)
        self.store.apply_fleet(fleet_change(fleet))
        return fleet

    def start(self) -> SchedulingLoop:
        """Build the service as ``flotilla up`` does over a database with a fleet in force
        (its clusters connected); ``notices`` holds what ``up`` would print."""
        settings = LoopSettings(replica=self.replica, heartbeat_timeout=self.heartbeat_timeout)
        # The tests turn their engine off and on between cycles they drive by hand: an
        # unreachable one is asked again at every cycle, not after a backoff, and its answer
        # read in that cycle however loaded the machine.
        engines = EngineSettings(answer_within=5.0, probe_within=5.0, backoff=0.0)
        config = ServiceConfig(loop=settings, api=TEST_API, engines=engines)
        self.service = build_service(config, store=self.store, backend_factory=self.factory)
        self.loop = self.service.loop
        return self.loop

    def api(self) -> TestClient:
        """A client of the service's REST API (as ``flotilla up`` serves it)."""
        assert self.service is not None, "not started"
        return TestClient(self.service.app())

    @property
    def notices(self) -> list[str]:
        assert self.service is not None, "not started"
        return self.service.notices

    def submit(self, *specs: JobSpec) -> list[str]:
        return self.store.submit_jobs(list(specs))

    def state(self, job_id: str) -> JobState:
        return self.store.get_job(job_id).state

    def cluster_of(self, job_id: str) -> str | None:
        run = self.store.get_job(job_id).run
        return run.cluster if run is not None else None

    def cycles(self, n: int = 3) -> None:
        assert self.loop is not None
        for _ in range(n):
            self.loop.cycle()

    def cycle_until(self, done: Callable[[], bool], limit: float = 20.0) -> None:
        assert self.loop is not None
        wait_until(done, "the loop to get there", limit, 0.02, self.loop.cycle)

    def close(self) -> None:
        if self.service is not None:
            self.service.stop()  # the loop and the fleet's backends; the store is ours
        self.store.close()


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'flotilla.db'}"


# --- a fake remote engine -----------------------------------------------------------------


@dataclass
class FakeEngine:
    """What a Ray head or a Slurm controller keeps: every run by id, whoever submitted it.
    Tests end runs by hand (``finish``) and take the engine down (``up = False``)."""

    nodes: tuple[NodeInfo, ...] = (
        NodeInfo(name="remote-0", capacity={"cpu": 4.0}, labels={}, taints=()),
    )
    up: bool = True
    runs: dict[str, RunStatus] = field(default_factory=dict)
    dispatches: dict[str, int] = field(default_factory=dict)
    """Run id → how many times a dispatch of it started something (must stay 1)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self) -> None:
        if not self.up:
            raise BackendUnavailable("fake engine at fake://engine does not answer")

    def finish(self, run_id: str, exit_code: int = 0) -> None:
        with self.lock:
            status = self.runs[run_id]
            state = BackendRunState.SUCCEEDED if exit_code == 0 else BackendRunState.FAILED
            self.runs[run_id] = RunStatus(
                run_id,
                status.job,
                status.cluster,
                state,
                status.dispatched_at,
                started_at=status.started_at,
                finished_at=time.time(),
                exit_code=exit_code,
            )


class FakeRemoteBackend:
    """A backend whose truth is the engine: a fresh object (another replica, a restart)
    sees every run, and its first ``poll`` reports every active one (adoption)."""

    name = "fake-remote"

    def __init__(self, engine: FakeEngine, cluster: str) -> None:
        self.engine = engine
        self.cluster = cluster
        self._seen: dict[str, BackendRunState] = {}

    def inventory(self) -> Inventory:
        self.engine.check()
        active = tuple(
            run_id
            for run_id, status in self.engine.runs.items()
            if status.state in (BackendRunState.PENDING, BackendRunState.RUNNING)
        )
        return Inventory(self.cluster, self.engine.nodes, time.time(), active)

    def dispatch(self, request: DispatchRequest) -> DispatchResult:
        self.engine.check()
        with self.engine.lock:
            if request.run_id not in self.engine.runs:
                now = time.time()
                self.engine.runs[request.run_id] = RunStatus(
                    request.run_id,
                    request.job,
                    self.cluster,
                    BackendRunState.RUNNING,
                    now,
                    started_at=now,
                )
                self.engine.dispatches[request.run_id] = (
                    self.engine.dispatches.get(request.run_id, 0) + 1
                )
            status = self.engine.runs[request.run_id]
        return DispatchResult(
            request.run_id, request.job, self.cluster, status.dispatched_at, request.placements
        )

    def cancel(self, request: CancelRequest) -> CancelResult:
        self.engine.check()
        with self.engine.lock:
            status = self.engine.runs.get(request.run_id)
            if status is None:
                return CancelResult(request.run_id, CancelOutcome.UNKNOWN_RUN, "unknown run")
            if status.state not in (BackendRunState.PENDING, BackendRunState.RUNNING):
                return CancelResult(request.run_id, CancelOutcome.ALREADY_FINISHED, "finished")
            self.engine.runs[request.run_id] = RunStatus(
                status.run_id,
                status.job,
                status.cluster,
                BackendRunState.CANCELLED,
                status.dispatched_at,
                started_at=status.started_at,
                finished_at=time.time(),
            )
        return CancelResult(request.run_id, CancelOutcome.STOPPING, "stopped")

    def status(self, request: StatusRequest) -> RunStatus:
        self.engine.check()
        status = self.engine.runs.get(request.run_id)
        if status is None:
            raise UnknownRun(request.run_id)
        return status

    def poll(self) -> list[RunStatus]:
        self.engine.check()
        changed = []
        for run_id, status in list(self.engine.runs.items()):
            if self._seen.get(run_id) is not status.state:
                self._seen[run_id] = status.state
                changed.append(status)
        return changed

    def logs(self, request: LogsRequest) -> LogChunk:
        self.engine.check()
        raise UnknownRun(request.run_id)

    def close(self) -> None:
        pass


def factory_with(engine: FakeEngine) -> Callable[..., Backend]:
    """Build ``fake-remote`` clusters on ``engine``, every other backend by entry point."""

    def build(name: str, **settings: Any) -> Backend:
        if name == "fake-remote":
            return FakeRemoteBackend(engine, settings["cluster"])
        return load_backend(name, **settings)

    return build
