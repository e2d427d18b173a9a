"""The ``sim`` backend: fake nodes whose runs end after a duration, on a wall or fake clock.

Nothing is executed. A run's life is a pure function of the clock and of what was asked
(dispatch time, the payload's ``sim`` section, cancels), so it behaves like ``local`` —
pending, running, SIGTERM with a grace period, SIGKILL, ``max_runtime`` — while tests drive it
with a ``FakeClock`` and demos or load tests run it in wall time. With a ``state_dir`` its
records survive a restart like ``local``'s.

The payload's ``sim`` section (``flotilla.model.payload.SimBehaviour``)::

    {"sim": {"duration": 2.5, "exit_code": 0, "output": ["hello"], "sigterm_delay": 0}}
"""

from __future__ import annotations

import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from flotilla.backends.common import (
    ChangeLog,
    check_request,
    check_same_job,
    pick_replica,
    placements_from_json,
    placements_to_json,
    read_json,
    run_directory,
    saved_run_ids,
    write_json_atomic,
)
from flotilla.backends.interface import (
    BackendClosed,
    BackendRunState,
    BackendUnavailable,
    CancelOutcome,
    CancelRequest,
    CancelResult,
    DispatchRejected,
    DispatchRequest,
    DispatchResult,
    Inventory,
    LogChunk,
    LogsRequest,
    LogStream,
    ReplicaPlacement,
    ReplicaStatus,
    RunStatus,
    StatusRequest,
    UnknownRun,
    new_placements,
)
from flotilla.model.cluster import NodeGroup
from flotilla.model.node_info import NodeInfo, node_infos
from flotilla.model.payload import PayloadError, SimBehaviour, parse_payload, parse_sim_behaviour

SIGTERM_CODE = -int(signal.SIGTERM)
SIGKILL_CODE = -int(signal.SIGKILL)

DEFAULT_NODES: tuple[Mapping[str, Any], ...] = (
    {"name": "sim-node", "count": 4, "resources": {"cpu": 16, "memory": "64Gi"}},
)


class FakeClock:
    """A clock tests move by hand: ``clock.advance(2.5)``. Starts at a fixed epoch time."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def sim_nodes(specs: Sequence[NodeInfo | Mapping[str, Any]]) -> tuple[NodeInfo, ...]:
    """``NodeInfo``s as given, or built from scenario-style node groups (``count`` expands)."""
    nodes: list[NodeInfo] = []
    for spec in specs:
        if isinstance(spec, NodeInfo):
            nodes.append(spec)
            continue
        nodes.extend(node_infos(NodeGroup.model_validate(spec)))
    return tuple(nodes)


@dataclass(frozen=True)
class SimStop:
    kind: str
    """``cancel`` (ends cancelled) or ``max-runtime`` (ends failed)."""
    message: str
    at: float
    grace_period: float


@dataclass(frozen=True)
class SimRun:
    result: DispatchResult
    behaviour: SimBehaviour
    max_runtime: float | None
    started_at: float
    grace_period: float
    stop: SimStop | None = None

    def termination(self) -> SimStop | None:
        """The first stop asked for: a cancel, or ``max_runtime`` running out."""
        candidates = [self.stop] if self.stop is not None else []
        if self.max_runtime is not None:
            message = f"exceeded max_runtime of {self.max_runtime:g}s"
            at = self.started_at + self.max_runtime
            candidates.append(SimStop("max-runtime", message, at, self.grace_period))
        return min(candidates, key=lambda stop: stop.at, default=None)

    def outcome(self) -> tuple[float, BackendRunState, int | None, str]:
        """When the run ends, in which state, with which exit code and message."""
        natural_end = self.started_at + self.behaviour.duration
        stop = self.termination()
        if stop is None or natural_end <= stop.at:
            code = self.behaviour.exit_code
            if code == 0:
                return natural_end, BackendRunState.SUCCEEDED, 0, ""
            return natural_end, BackendRunState.FAILED, code, f"exited with code {code}"
        if stop.at < self.started_at:  # stopped while pending: nothing to signal
            return stop.at, BackendRunState.CANCELLED, None, stop.message
        killed = self.behaviour.sigterm_delay > stop.grace_period
        delay = stop.grace_period if killed else self.behaviour.sigterm_delay
        end = min(natural_end, stop.at + delay)
        code = SIGKILL_CODE if killed else SIGTERM_CODE
        if stop.kind == "cancel":
            return end, BackendRunState.CANCELLED, None, stop.message
        return end, BackendRunState.FAILED, code, stop.message

    def status(self, now: float) -> RunStatus:
        end, final, code, message = self.outcome()
        result = self.result
        if now >= end:
            started = self.started_at if self.started_at <= end else None
            state, finished = final, end
        elif now < self.started_at:
            state, started, finished, code, message = BackendRunState.PENDING, None, None, None, ""
        else:
            state, started, finished, code = BackendRunState.RUNNING, self.started_at, None, None
            stop = self.termination()
            message = f"stopping: {stop.message}" if stop and stop.at <= now else ""
        return RunStatus(
            run_id=result.run_id,
            job=result.job,
            cluster=result.cluster,
            state=state,
            dispatched_at=result.dispatched_at,
            started_at=started,
            finished_at=finished,
            exit_code=code,
            message=message,
            replicas=tuple(
                ReplicaStatus(p.task, p.replica, p.node, state, code) for p in result.placements
            ),
        )

    def log_text(self, placement: ReplicaPlacement, stream: LogStream, now: float) -> bytes:
        """The synthetic output written so far: a start line, the payload's lines, progress."""
        end, final, code, _ = self.outcome()
        lines: list[str] = []
        label = f"{placement.label} of {self.result.job}"
        if now >= self.started_at and stream is LogStream.STDOUT:
            lines.append(f"[sim] {label} started on {placement.node}")
            lines.extend(self.behaviour.output)
            lines.extend(
                f"[sim] {label} running for {second}s"
                for second in range(1, int(min(now, end) - self.started_at) + 1)
            )
        if now >= end and now >= self.started_at:
            if stream is LogStream.STDOUT and final is BackendRunState.SUCCEEDED:
                lines.append(f"[sim] {label} exited with code 0")
            elif stream is LogStream.STDERR and final is not BackendRunState.SUCCEEDED:
                ending = f"exited with code {code}" if code is not None else final.value
                lines.append(f"[sim] {label} {ending}")
        return "".join(f"{line}\n" for line in lines).encode()

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "run_id": self.result.run_id,
            "job": self.result.job,
            "cluster": self.result.cluster,
            "dispatched_at": self.result.dispatched_at,
            "placements": placements_to_json(self.result.placements),
            "behaviour": self.behaviour.model_dump(),
            "max_runtime": self.max_runtime,
            "started_at": self.started_at,
            "grace_period": self.grace_period,
            "stop": None if self.stop is None else vars(self.stop).copy(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SimRun:
        stop = data["stop"]
        return cls(
            result=DispatchResult(
                run_id=data["run_id"],
                job=data["job"],
                cluster=data["cluster"],
                dispatched_at=data["dispatched_at"],
                placements=placements_from_json(data["placements"]),
            ),
            behaviour=SimBehaviour.model_validate(data["behaviour"]),
            max_runtime=data["max_runtime"],
            started_at=data["started_at"],
            grace_period=data["grace_period"],
            stop=None if stop is None else SimStop(**stop),
        )


@dataclass
class SimBackend:
    """Fake nodes, fake runs. ``startup_delay``: seconds a run stays pending.

    ``default_duration`` applies to runs whose payload has no ``sim`` section.
    """

    cluster: str = "sim"
    nodes: Sequence[NodeInfo | Mapping[str, Any]] = DEFAULT_NODES
    state_dir: Path | None = None
    clock: Callable[[], float] = time.time
    grace_period: float = 10.0
    startup_delay: float = 0.0
    default_duration: float = 1.0
    finished_runs_kept: int = 1_000
    """Finished runs, once reported by ``poll``, kept in memory (the most recent ones; older
    ones are read back from ``state_dir`` if there is one, else unknown): memory follows the
    active runs, not every run ever dispatched."""
    fail_at: float | None = None
    """When (on ``clock``) the cluster fails: from then on every call raises
    ``BackendUnavailable``, as an engine that stopped answering, and the service loses the
    cluster after its heartbeat timeout (``flotilla replay`` gives a scenario's ``fail_at``
    so)."""
    name: str = field(default="sim", init=False)

    def __post_init__(self) -> None:
        self._nodes = sim_nodes(self.nodes)
        self._lock = threading.RLock()
        self._runs: dict[str, SimRun] = {}
        """Runs not yet reported finished."""
        self._finished: OrderedDict[str, SimRun] = OrderedDict()
        """Runs reported finished, oldest first, at most ``finished_runs_kept``."""
        self._changes = ChangeLog()
        self._closed = False
        if self.state_dir is not None:
            self.state_dir = Path(self.state_dir)
            for run_id in saved_run_ids(self.state_dir):
                data = read_json(run_directory(self.state_dir, run_id) / "run.json")
                if data is None or data.get("version") != 1:
                    continue
                run = SimRun.from_json(data)
                state = run.status(self.clock()).state
                if state.terminal:
                    self._keep_finished(run_id, run)
                    continue
                self._runs[run_id] = run
                self._changes.remember(run_id, state)
                self._changes.mark(run_id)

    def inventory(self) -> Inventory:
        with self._lock:
            self._check_open()
            now = self.clock()
            active = tuple(
                run_id for run_id, run in self._runs.items() if not run.status(now).state.terminal
            )
            return Inventory(self.cluster, self._nodes, now, active)

    def dispatch(self, request: DispatchRequest) -> DispatchResult:
        with self._lock:
            self._check_open()
            existing = self._lookup(request.run_id)
            if existing is not None:
                check_same_job(existing.result, request)
                return existing.result
            check_request(request, self.cluster, self._nodes)
            behaviour = self._behaviour(request)
            now = self.clock()
            result = DispatchResult(
                request.run_id, request.job, self.cluster, now, request.placements
            )
            run = SimRun(
                result=result,
                behaviour=behaviour,
                max_runtime=request.max_runtime,
                started_at=now + self.startup_delay,
                grace_period=self.grace_period,
            )
            self._store(run)
            self._changes.observe(run.result.run_id, run.status(now).state)
            return result

    def add_replicas(self, request: DispatchRequest) -> DispatchResult:
        """``ReplicaGrowth``: the new placements join the run; its end stays what its
        behaviour says (every replica of a sim run ends together)."""
        with self._lock:
            self._check_open()
            run = self._lookup(request.run_id)
            if run is None:
                raise UnknownRun(request.run_id)
            added = new_placements(run.result, request)
            if not added:
                return run.result
            if run.status(self.clock()).state.terminal:
                raise DispatchRejected(f"run {request.run_id} has ended: no replica can join it")
            check_request(request, self.cluster, self._nodes)
            grown = replace(
                run, result=replace(run.result, placements=run.result.placements + added)
            )
            self._store(grown)
            self._changes.mark(request.run_id)
            return grown.result

    def cancel(self, request: CancelRequest) -> CancelResult:
        with self._lock:
            self._check_open()
            run = self._lookup(request.run_id)
            if run is None:
                message = f"no run {request.run_id!r} on this backend; nothing to cancel"
                return CancelResult(request.run_id, CancelOutcome.UNKNOWN_RUN, message)
            now = self.clock()
            status = run.status(now)
            termination = run.termination()
            if status.state.terminal:
                outcome, message = CancelOutcome.ALREADY_FINISHED, f"run already {status.state}"
            elif termination is not None and termination.at <= now:
                outcome = CancelOutcome.ALREADY_STOPPING
                message = f"run is already stopping: {termination.message}"
            else:
                grace = self.grace_period if request.grace_period is None else request.grace_period
                run = replace(run, stop=SimStop("cancel", request.reason, now, grace))
                self._store(run)
                outcome, message = CancelOutcome.STOPPING, "SIGTERM sent to every replica"
                status = run.status(now)
                self._changes.observe(request.run_id, status.state)
                self._changes.mark(request.run_id)
            return CancelResult(request.run_id, outcome, message, status)

    def status(self, request: StatusRequest) -> RunStatus:
        with self._lock:
            self._check_open()
            return self._get(request.run_id).status(self.clock())

    def poll(self) -> list[RunStatus]:
        with self._lock:
            self._check_open()
            now = self.clock()
            for run_id, run in self._runs.items():
                self._changes.observe(run_id, run.status(now).state)
            statuses = [self._runs[run_id].status(now) for run_id in self._changes.drain()]
            for status in statuses:
                if status.state.terminal:
                    self._retire(status.run_id)
            return statuses

    def logs(self, request: LogsRequest) -> LogChunk:
        with self._lock:
            self._check_open()
            run = self._get(request.run_id)
            now = self.clock()
            index = pick_replica(run.result.placements, request.task, request.replica)
            text = run.log_text(run.result.placements[index], request.stream, now)
            terminal = run.status(now).state.terminal
        data = text[request.offset : request.offset + max(0, request.limit)]
        next_offset = request.offset + len(data)
        complete = terminal and next_offset >= len(text)
        return LogChunk(request.run_id, request.stream, request.offset, next_offset, data, complete)

    def close(self) -> None:
        with self._lock:
            self._closed = True

    # --- internals ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise BackendClosed(f"the sim backend of cluster {self.cluster!r} is closed")
        if self.fail_at is not None and self.clock() >= self.fail_at:
            raise BackendUnavailable(f"cluster {self.cluster} failed (its fail_at)")

    def _get(self, run_id: str) -> SimRun:
        run = self._lookup(run_id)
        if run is None:
            raise UnknownRun(run_id)
        return run

    def _retire(self, run_id: str) -> None:
        """A finished run was reported: keep it among the recent finished ones only."""
        run = self._runs.pop(run_id, None)
        if run is not None:
            self._changes.forget(run_id)
            self._keep_finished(run_id, run)

    def _keep_finished(self, run_id: str, run: SimRun) -> None:
        self._finished[run_id] = run
        while len(self._finished) > self.finished_runs_kept:
            self._finished.popitem(last=False)

    def _lookup(self, run_id: str) -> SimRun | None:
        """The run, also one another backend object over the same state dir recorded after
        this one started (a scheduler replica taking over adopts it, as with ``local``)."""
        run = self._runs.get(run_id) or self._finished.get(run_id)
        if run is not None or self.state_dir is None:
            return run
        data = read_json(run_directory(self.state_dir, run_id) / "run.json")
        if data is None or data.get("version") != 1:
            return None
        run = SimRun.from_json(data)
        state = run.status(self.clock()).state
        if state.terminal:
            self._keep_finished(run_id, run)
        else:
            self._runs[run_id] = run
            self._changes.remember(run_id, state)
        return run

    def _behaviour(self, request: DispatchRequest) -> SimBehaviour:
        """The ``sim`` section; the rest of the payload is checked as a real backend would."""
        payload = request.payload or {}
        try:
            behaviour = parse_sim_behaviour(payload)
            if set(payload) - {"sim"}:
                parse_payload(request.job_type, payload)
        except PayloadError as error:
            raise DispatchRejected(str(error)) from None
        return behaviour or SimBehaviour(duration=self.default_duration)

    def _store(self, run: SimRun) -> None:
        self._runs[run.result.run_id] = run
        if self.state_dir is not None:
            path = run_directory(self.state_dir, run.result.run_id) / "run.json"
            write_json_atomic(path, run.to_json())


def make_sim_backend(**config: Any) -> SimBackend:
    """The entry-point factory: ``state_dir`` may be a string."""
    if isinstance(config.get("state_dir"), str):
        config["state_dir"] = Path(config["state_dir"])
    return SimBackend(**config)
