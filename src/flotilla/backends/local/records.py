"""The ``local`` backend's run records: in memory while it runs, ``run.json`` on disk.

Kept apart from the process handling so the record format (what a restart relies on) is in
one short place. ``RECORD_VERSION`` changes whenever a field changes meaning.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flotilla.backends.common import (
    placements_from_json,
    placements_to_json,
    read_json,
    write_json_atomic,
)
from flotilla.backends.interface import (
    BackendRunState,
    DispatchResult,
    ReplicaPlacement,
    ReplicaStatus,
    RunStatus,
)
from flotilla.backends.local.gpu_telemetry import DeviceShare
from flotilla.backends.local.identity import Identity
from flotilla.backends.local.processes import describe_exit
from flotilla.model.gpu_use import GpuUse
from flotilla.model.run_resources import RunResources

RECORD_VERSION = 1
CHECKPOINT_FILE = ".flotilla-checkpoint"
"""In the run's scratch dir: the job touches it to report a checkpoint
(``flotilla.checkpoint()``)."""


@dataclass
class Stop:
    """Why and since when a run is being stopped; ``killed`` once SIGKILL was sent.

    ``kind``: ``cancel`` (ends cancelled), ``max-runtime``, ``gpu-memory`` (over its GPU memory
    share, ``gpu_sharing: monitor``) or ``replica-failed`` (end failed).
    """

    kind: str
    message: str
    at: float
    grace_period: float
    killed: bool = False
    exit_code: int | None = None
    """For ``replica-failed``: the code of the replica whose failure stopped the others."""


@dataclass
class Supervisor:
    """One supervisor of a run: it starts and watches a batch of its replicas (``members``,
    their indexes in the run), see ``_supervise.py``. ``process``: the handle when this
    backend started it (a restarted one finds it by pid and start time)."""

    pid: int
    start_ticks: int | None
    members: list[int]
    pids_loaded: bool = False
    """Its replicas' pids were read from its pids file."""
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_ticks": self.start_ticks, "members": self.members}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Supervisor:
        return cls(int(data["pid"]), data.get("start_ticks"), [int(i) for i in data["members"]])


@dataclass
class Replica:
    """One replica's process. ``pid`` is also its process group id (it leads a session).

    ``supervisor``: the index in ``Run.supervisors`` of the one that started it (``None``:
    a supervisor of its own, as versions before the batches had; its ``pid`` is then the
    supervisor's). With one, ``pid`` is the command's, known once it started."""

    placement: ReplicaPlacement
    pid: int | None = None
    start_ticks: int | None = None
    finished: bool = False
    exit_code: int | None = None
    error: str | None = None
    vanished: bool = False
    memory_request: float | None = None
    """Bytes its cgroup limits it to (``None``: not limited); see ``local/tree.py``."""
    over_memory: bool = False
    """It failed for exceeding ``memory_request`` (the OOM killer ended it)."""
    ended_at: float | None = None
    """When its command exited, from its supervisor's exit file (``None``: not known)."""
    cpu_seconds: float | None = None
    """CPU seconds its cgroup counted when it ended (``None``: no cgroup, or not ended)."""
    memory_peak: int | None = None
    """The peak memory (bytes) its cgroup counted when it ended (``None``: not measured)."""
    supervisor: int | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)
    drain_until: float | None = field(default=None, repr=False, compare=False)
    """Stopped, its command over: until when (monotonic) its supervisor may still copy what
    is left in the pipes into the logs before it is killed too (``local/ending.py``)."""
    _shown: tuple[tuple[Any, ...], ReplicaStatus] | None = field(
        default=None, repr=False, compare=False
    )
    """Its last ``ReplicaStatus`` and what it was made of (``status``)."""

    def status(self, run_state: BackendRunState) -> ReplicaStatus:
        """Its status in a run in ``run_state``: the one made last time while nothing it
        shows changed (a status of 10,000 replicas, asked every poll, made them all anew)."""
        key = (run_state, self.finished, self.vanished, self.exit_code, self.error, self.pid)
        if self._shown is not None and self._shown[0] == key:
            return self._shown[1]
        shown = ReplicaStatus(
            task=self.placement.task,
            replica=self.placement.replica,
            node=self.placement.node,
            state=self.state(run_state),
            exit_code=self.exit_code,
            process_id=self.pid,
            engine_id=None if self.pid is None else f"pid {self.pid}",
        )
        self._shown = (key, shown)
        return shown

    def attach(self, process: subprocess.Popen[bytes], ticks: int | None) -> None:
        self.process, self.pid, self.start_ticks = process, process.pid, ticks

    def finish(
        self, exit_code: int | None, error: str | None = None, *, vanished: bool = False
    ) -> None:
        self.finished, self.exit_code, self.error, self.vanished = True, exit_code, error, vanished
        self.process = None

    @property
    def succeeded(self) -> bool:
        return self.finished and self.exit_code == 0 and self.error is None

    def outcome(self) -> str:
        if self.error:
            return self.error
        if self.vanished or self.exit_code is None:
            return "vanished while no backend was watching; its outcome is unknown"
        return describe_exit(self.exit_code)

    def state(self, run_state: BackendRunState) -> BackendRunState:
        if not self.finished:
            return BackendRunState.RUNNING
        if self.vanished:
            return BackendRunState.LOST
        if run_state is BackendRunState.CANCELLED:
            return BackendRunState.CANCELLED
        return BackendRunState.SUCCEEDED if self.succeeded else BackendRunState.FAILED

    def to_json(self) -> dict[str, Any]:
        return {
            "placement": placements_to_json([self.placement])[0],
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "finished": self.finished,
            "exit_code": self.exit_code,
            "error": self.error,
            "vanished": self.vanished,
            "memory_request": self.memory_request,
            "over_memory": self.over_memory,
            "ended_at": self.ended_at,
            "cpu_seconds": self.cpu_seconds,
            "memory_peak": self.memory_peak,
            "supervisor": self.supervisor,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Replica:
        return cls(
            placement=placements_from_json([data["placement"]])[0],
            pid=data["pid"],
            start_ticks=data["start_ticks"],
            finished=data["finished"],
            exit_code=data["exit_code"],
            error=data["error"],
            vanished=data["vanished"],
            memory_request=data.get("memory_request"),
            over_memory=data.get("over_memory", False),
            ended_at=data.get("ended_at"),
            cpu_seconds=data.get("cpu_seconds"),
            memory_peak=data.get("memory_peak"),
            supervisor=data.get("supervisor"),
        )


@dataclass
class Run:
    result: DispatchResult
    directory: Path
    max_runtime: float | None
    replicas: list[Replica]
    state: BackendRunState = BackendRunState.PENDING
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    message: str = ""
    stop: Stop | None = None
    scratch: Path | None = None
    """The run's own scratch working dir, removed when it ends (None: it has none)."""
    identity: Identity | None = None
    """Who its commands run as (None: the server's user)."""
    identity_released: bool = False
    """A dynamic identity: every process of its uid is gone and the uid given back."""
    supervisors: list[Supervisor] = field(default_factory=list)
    """The supervisors that started its replicas, a batch each (``local/starting.py``)."""
    starting: bool = field(default=False, compare=False)
    """Its replicas are being started (``LocalBackend.dispatch``'s starter thread)."""
    exit_names: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    """Exit file name → the position of its replica (those of batches; made when needed)."""
    seen_exits: set[str] = field(default_factory=set, compare=False, repr=False)
    """The names in its directory at the last look for exit files."""
    seen_directory: int | None = field(default=None, compare=False)
    """The run directory's mtime (ns) when its exit files were last looked for."""
    pids_saved: int = field(default=0, compare=False)
    """How many of its supervisors' pids files are in its record on disk (saved when more
    are learned)."""
    _unbatched: tuple[int, list[int]] = field(default=(-1, []), compare=False, repr=False)
    open_from: int = field(default=0, compare=False)
    """No replica before this index is unfinished (``first_open``)."""
    failures_unchecked: bool = field(default=True, compare=False)
    """Replicas may have ended, failed, since ``local_ending.stop_due`` last looked."""
    listed_at: float = field(default=float("-inf"), compare=False)
    """When (monotonic) its directory was last listed for exit files
    (``local_ending.listing_due``)."""
    record_stale: bool = field(default=False, compare=False)
    """Replicas ended since its record was last saved (``LocalBackend._refresh`` saves such
    a change at most every ``RECORD_SECONDS``: their exit files hold it meanwhile)."""
    record_saved: float = field(default=float("-inf"), compare=False)
    """When (monotonic) its record was last saved by this backend."""
    gpu_shares: tuple[DeviceShare, ...] = ()
    """What its replicas hold of each device (``gpu_telemetry.shares_of``)."""
    gpu: GpuUse | None = None
    """Its GPU use as last sampled (``gpu_telemetry.py``; None: never sampled)."""
    last_checkpoint_at: float | None = None
    """The time of the run's checkpoint file when last read (``checkpoint_file``)."""

    @property
    def run_id(self) -> str:
        return self.result.run_id

    def first_open(self) -> int:
        """The index of its first unfinished replica (``len(replicas)``: all finished).
        Amortised O(1) per call: a replica never becomes unfinished again, so the scan goes
        on from where the last one stopped, not over 10,000 replicas each monitor tick."""
        replicas, index = self.replicas, self.open_from
        while index < len(replicas) and replicas[index].finished:
            index += 1
        self.open_from = index
        return index

    def unbatched(self) -> list[int]:
        """The indexes of its replicas with a supervisor of their own (started by a version
        before the batches): looked for once per size of the run, not every monitor tick.
        Only asked once its start is over (every started replica has a supervisor then)."""
        if self._unbatched[0] != len(self.replicas):
            indexes = [i for i, r in enumerate(self.replicas) if r.supervisor is None]
            self._unbatched = (len(self.replicas), indexes)
        return self._unbatched[1]

    @property
    def all_finished(self) -> bool:
        return self.first_open() == len(self.replicas)

    def _stem(self, replica: Replica) -> str:
        return f"{replica.placement.task}-{replica.placement.replica}"

    def log_file(self, replica: Replica, stream: str) -> Path:
        return self.directory / f"{self._stem(replica)}.{stream}"

    def exit_file(self, replica: Replica) -> Path:
        return self.directory / f"{self._stem(replica)}.exit"

    def pids_file(self, supervisor: int) -> Path:
        """The pids of the commands supervisor ``supervisor`` started (see _supervise)."""
        return self.directory / f"pids-{supervisor}"

    def supervisor_log(self, supervisor: int) -> Path:
        """What supervisor ``supervisor`` itself wrote (its own errors, if any)."""
        return self.directory / f"supervisor-{supervisor}.log"

    def log_usage_file(self) -> Path:
        """How many bytes of log the run's replicas wrote so far (see _supervise)."""
        return self.directory / "log-usage"

    @property
    def holds_identity(self) -> bool:
        """The run holds a uid of its own that is still to be given back."""
        return self.identity is not None and self.identity.dynamic and not self.identity_released

    def checkpoint_file(self) -> Path | None:
        """The file the job touches to report a checkpoint (``FLOTILLA_CHECKPOINT_FILE``): in
        its scratch dir, which it owns; ``None`` when the run has no scratch dir."""
        return None if self.scratch is None else self.scratch / CHECKPOINT_FILE

    def gate_file(self) -> Path:
        """``go`` or ``abandon``: whether the replicas' commands may run (see _supervise)."""
        return self.directory / "gate"

    def settle(self, now: float) -> None:
        """Every replica is gone: decide the run's final state, once. It ended when its last
        command exited, if every exit time is known (a run that ended while no backend watched
        does not end at the restart), else now."""
        ends = [replica.ended_at for replica in self.replicas if replica.ended_at is not None]
        self.finished_at = now
        if ends and len(ends) == len(self.replicas):
            self.finished_at = max(min(max(ends), now), self.started_at or 0.0)
        stop = self.stop
        failed = next((r for r in self.replicas if r.finished and not r.succeeded), None)
        if stop is not None and stop.kind == "cancel":
            self.state, self.exit_code, self.message = BackendRunState.CANCELLED, None, stop.message
        elif any(replica.vanished for replica in self.replicas):
            lost = next(replica for replica in self.replicas if replica.vanished)
            self.state, self.exit_code = BackendRunState.LOST, None
            self.message = f"replica {lost.placement.label} {lost.outcome()}"
        elif stop is not None:
            self.state, self.message = BackendRunState.FAILED, stop.message
            self.exit_code = stop.exit_code if stop.exit_code is not None else None
            if self.exit_code is None and failed is not None:
                self.exit_code = failed.exit_code
        elif failed is not None:
            self.state, self.exit_code = BackendRunState.FAILED, failed.exit_code
            self.message = f"replica {failed.placement.label} {failed.outcome()}"
        else:
            self.state, self.exit_code, self.message = BackendRunState.SUCCEEDED, 0, ""

    def status(self) -> RunStatus:
        message = self.message
        if not self.state.terminal and self.stop is not None:
            message = f"stopping: {self.stop.message}"
        return RunStatus(
            run_id=self.run_id,
            job=self.result.job,
            cluster=self.result.cluster,
            state=self.state,
            dispatched_at=self.result.dispatched_at,
            started_at=self.started_at,
            finished_at=self.finished_at,
            exit_code=self.exit_code,
            message=message,
            gpu=self.gpu,
            replicas=tuple(replica.status(self.state) for replica in self.replicas),
            last_checkpoint_at=self.last_checkpoint_at,
            resources=self._resources(),
            over_limit=self.state is BackendRunState.FAILED
            and (
                (self.stop is not None and self.stop.kind in ("max-runtime", "gpu-memory"))
                or any(replica.over_memory for replica in self.replicas)
            ),
        )

    def _resources(self) -> RunResources | None:
        """Its replicas' measured use, once it ended (``None`` before, or when not measured)."""
        if not self.state.terminal:
            return None
        measured = RunResources.of_replicas(
            RunResources(replica.cpu_seconds, replica.memory_peak) for replica in self.replicas
        )
        return measured if measured.measured else None

    def to_json(self) -> dict[str, Any]:
        stop = self.stop
        return {
            "version": RECORD_VERSION,
            "run_id": self.run_id,
            "job": self.result.job,
            "cluster": self.result.cluster,
            "dispatched_at": self.result.dispatched_at,
            "max_runtime": self.max_runtime,
            "state": self.state.value,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "exit_code": self.exit_code,
            "message": self.message,
            "stop": None if stop is None else vars(stop).copy(),
            "scratch": None if self.scratch is None else str(self.scratch),
            "identity": None if self.identity is None else self.identity.to_json(),
            "identity_released": self.identity_released,
            "supervisors": [supervisor.to_json() for supervisor in self.supervisors],
            "last_checkpoint_at": self.last_checkpoint_at,
            "replicas": [replica.to_json() for replica in self.replicas],
            "gpu_shares": [vars(share).copy() for share in self.gpu_shares],
            "gpu": None if self.gpu is None else self.gpu.to_json(),
        }

    @classmethod
    def load(cls, directory: Path) -> Run | None:
        """The run recorded in ``directory``, or ``None`` for an unreadable or alien record."""
        data = read_json(directory / "run.json")
        if data is None or data.get("version") != RECORD_VERSION:
            return None
        replicas = [Replica.from_json(item) for item in data["replicas"]]
        result = DispatchResult(
            run_id=data["run_id"],
            job=data["job"],
            cluster=data["cluster"],
            dispatched_at=data["dispatched_at"],
            placements=tuple(replica.placement for replica in replicas),
        )
        stop, identity = data["stop"], data.get("identity")
        return cls(
            result=result,
            directory=directory,
            max_runtime=data["max_runtime"],
            replicas=replicas,
            state=BackendRunState(data["state"]),
            started_at=data["started_at"],
            finished_at=data["finished_at"],
            exit_code=data["exit_code"],
            message=data["message"],
            stop=None if stop is None else Stop(**stop),
            scratch=Path(data["scratch"]) if data.get("scratch") else None,
            identity=Identity.from_json(identity) if identity else None,
            identity_released=bool(data.get("identity_released")),
            supervisors=[Supervisor.from_json(item) for item in data.get("supervisors") or ()],
            gpu_shares=tuple(DeviceShare(**share) for share in data.get("gpu_shares", ())),
            gpu=GpuUse.from_json(data["gpu"]) if data.get("gpu") else None,
            last_checkpoint_at=data.get("last_checkpoint_at"),
        )


def record_path(run: Run) -> Path:
    return run.directory / "run.json"


def save_run(run: Run, *, durable: bool = True) -> None:
    """``durable=False``: atomic but not yet fsynced; see ``LocalBackend._sync_records``."""
    write_json_atomic(record_path(run), run.to_json(), durable=durable)
