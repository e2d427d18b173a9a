"""The ``local`` backend: runs each replica as a process group on this machine.

Every run has a directory under ``state_dir/runs/RUN_ID`` (0700, like the state dir: the
server's alone) holding ``run.json`` (its record, rewritten atomically on every change), its
``gate`` and ``log-usage``, and, per replica, ``TASK-REPLICA.stdout``, ``.stderr`` and
``.exit`` (written by the supervisor when the command ends). A new ``LocalBackend`` over
the same state dir reads the records, adopts the processes still alive, takes the outcome of
the ones that ended meanwhile from their exit files, and reports the others ``lost``.
A monitor thread enforces ``max_runtime`` and the SIGKILL after the grace period, so neither
depends on anyone calling.

Starting a run is in ``local/starting.py``; stopping replicas and finding them over in
``local/ending.py``; what a job gets of this machine (a clean environment, a scratch
directory, a working dir inside it) in ``local/environment.py``; who it runs as (``run_as``,
or a uid of its own per run from ``uid_range``, given back once every process of the run is
gone) in ``local/identity.py``; the run records in ``local/records.py``; starting and
signalling processes in ``processes.py`` and ``_supervise.py``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from flotilla.backends.common import (
    ChangeLog,
    check_request,
    check_same_job,
    command_payload_of,
    pick_replica,
    read_log_slice,
    run_directory,
    saved_run_ids,
    sync_file,
)
from flotilla.backends.interface import (
    RUN_ID_PATTERN,
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
    ReplicaPlacement,
    RunBusy,
    RunStatus,
    StatusRequest,
    UnknownRun,
    new_placements,
)
from flotilla.backends.local import ending as local_ending
from flotilla.backends.local import environment as local_environment
from flotilla.backends.local import gpu_mps, gpu_telemetry
from flotilla.backends.local import identity as local_identity
from flotilla.backends.local import starting as local_starting
from flotilla.backends.local._supervise import claim_gate
from flotilla.backends.local.accounts import parse_account_map
from flotilla.backends.local.cgroups import DEFAULT_MAX_PIDS
from flotilla.backends.local.environment import DEFAULT_PASSTHROUGH
from flotilla.backends.local.gpu_inventory import discover_gpus, visible_devices, with_gpus
from flotilla.backends.local.gpu_sampler import GpuSampler
from flotilla.backends.local.gpu_sources import GpuDevice, GpuSource, GpuUnavailable
from flotilla.backends.local.identity import (
    Identity,
    IdentityPool,
    OwnerUids,
    fixed_identity,
    parse_uid_range,
)
from flotilla.backends.local.records import Replica, Run, Stop, record_path, save_run
from flotilla.backends.local.run_lock import RunLocks
from flotilla.backends.local.tree import ProcessTrees
from flotilla.model.cluster import GpuSharing
from flotilla.model.names import TASK_NAME_LIMITS
from flotilla.model.node_info import NodeInfo
from flotilla.model.payload import CommandPayload

SWEEP_SECONDS = 5.0
"""How long ``close`` waits for a sweep of an ended run's uid before leaving it to the next
backend over the state dir."""

RECORD_SECONDS = 1.0
"""How often at most a running run's record is rewritten for replicas that ended (its state,
a stop, pids are written at once). Each write holds every replica: 10,000 replicas of
``true`` ending over a minute rewrote the record every monitor tick, quadratic in the
replicas (issue 23). Meanwhile their supervisors' exit files hold how they ended, which is
what a backend restarted over the state dir reads."""

log = logging.getLogger(__name__)


def default_state_dir(cluster: str) -> Path:
    base = os.environ.get("FLOTILLA_STATE_DIR") or Path.home() / ".local/state/flotilla"
    return Path(base) / "backends" / cluster


def local_node(
    name: str | None = None, gpus: int | None = None, gpu_source: GpuSource | None = None
) -> NodeInfo:
    """This machine as one node: its usable cores, its memory, and its GPUs as
    ``gpu_inventory.discover_gpus`` finds them (``gpus`` or ``FLOTILLA_LOCAL_GPUS``, else NVML)."""
    host = name or socket.gethostname()
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    bare = NodeInfo(
        name=host,
        capacity={"cpu": float(cores), "memory": float(_memory_bytes())},
        labels={"hostname": host, "backend": "local"},
        taints=(),
    )
    discovery = discover_gpus(gpus, gpu_source)
    if discovery.source is not None:
        discovery.source.close()  # read once: nothing samples it
    return with_gpus(bare, discovery)


def _memory_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - not Linux
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass
class LocalBackend:
    """Runs on this machine. One cluster, one node; see the module docstring for the layout.

    ``working_dir``: where commands run, and what a payload ``working_dir`` is relative to
    (default: each run's own fresh scratch directory). ``allowed_working_dirs``: absolute
    paths a payload ``working_dir`` may name (else it must stay inside, without ``..``).
    ``stop_runs_on_close``: stop every run (SIGTERM, grace, SIGKILL) on ``close`` instead of
    leaving it to a successor. ``run_as``: the user (name or uid) every command runs as;
    ``uid_range`` (``"FIRST-LAST"``): a uid of its own per run instead; both need the backend
    to run as root, neither: the backend's own user. ``log_limit``: bytes of log per run (a
    quantity; ``None``: no limit). ``env_passthrough``: the only variables of the backend's
    environment a command sees (see ``local/environment.py``).
    ``max_pids``: processes and threads one replica may have at once; ``isolate=False``: no
    cgroup, no PID namespace (``local/tree.py``).
    """

    SHOWN_SETTINGS: ClassVar[frozenset[str]] = frozenset({"node_name"})
    """Settings whose values anyone sees (the node's name): never a secret reference."""

    cluster: str = "local"
    state_dir: Path | None = None
    grace_period: float = 10.0
    gpus: int | None = None
    node_name: str | None = None
    working_dir: Path | None = None
    stop_runs_on_close: bool = False
    run_as: str | None = None
    uid_range: str | Sequence[int] | None = None
    env_passthrough: tuple[str, ...] = DEFAULT_PASSTHROUGH
    log_limit: float | str | None = local_starting.DEFAULT_LOG_LIMIT
    allowed_working_dirs: Sequence[str | Path] = ()
    any_working_dir: bool = False
    """Take any absolute ``working_dir`` (the user's submit directory, as ``sbatch`` does),
    entered as the job's user, which is the check; ``flotilla up``'s own local cluster does,
    unless ``--allow-working-dir`` names the directories (issue 37)."""
    run_as_accounts: Mapping[str, Any] | None = None
    """Owner or queue → the account its jobs run as, before ``run_as``/``uid_range``
    (``local/accounts.py``)."""
    max_pids: int = DEFAULT_MAX_PIDS
    max_run_pids: int | None = None
    """Processes and threads one run may have at once, all replicas together (``None``: half of
    the machine's ``pid_max``)."""
    isolate: bool = True
    owner_uids: OwnerUids | None = None
    """With ``uid_range``: where each owner's uid of the range is kept (the server's store),
    so that every run of one owner runs as its uid (issue 37); ``None``: a uid per run."""
    monitor_interval: float = 0.05
    clock: Callable[[], float] = time.time
    gpu_source: GpuSource | None = None
    """Where GPUs are discovered when no count is given (NVML; a fake NVML in tests), and
    sampled for each run's GPU use (``gpu_telemetry.py``)."""
    gpu_sharing: str = GpuSharing.SHARED.value
    """The cluster's ``gpu_sharing``: ``monitor`` stops a run over its GPU memory share;
    ``mps`` runs GPU jobs as clients of an MPS daemon limited to their share (``gpu_mps.py``)."""
    gpu_sample_interval: float = 5.0
    """Seconds between two GPU samples (``gpu_sampler.py``: a thread of its own, NVML
    initialised once)."""
    name: str = field(default="local", init=False)

    def __post_init__(self) -> None:
        # Absolute: commands run in their own working dir, and the supervisor opens the gate
        # and exit files by the paths it is given (a relative one would point into the
        # command's working dir).
        self.state_dir = Path(self.state_dir or default_state_dir(self.cluster)).absolute()
        # Records, logs and exit files: the server's only (a job's working dir may not lead
        # into them, and the runs of others are not its business).
        for directory in (self.state_dir, self.state_dir / "runs"):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(directory, 0o700)
        self._scratch_runs = self.working_dir is None
        self.working_dir = Path(self.working_dir or Path.cwd()).absolute()
        if self.run_as is not None and self.uid_range is not None:
            raise ValueError(
                "uid_range: set either run_as (every run as that account) or uid_range (a uid "
                "of its own per run), not both"
            )
        self._account = fixed_identity(self.run_as)
        self._accounts = parse_account_map(
            self.run_as_accounts,
            None if self.uid_range is None else parse_uid_range(self.uid_range),
        )
        self._pool = (
            None
            if self.uid_range is None
            else IdentityPool(self.state_dir, parse_uid_range(self.uid_range))
        )
        self._log_limit = local_starting.log_limit_of(self.log_limit)
        self._allowed = local_environment.check_allowed_dirs(self.allowed_working_dirs)
        self._owner_uid_cache: dict[str, int] = {}
        """Owners' uids as the store said (an owner's uid never changes)."""
        self._sweeps: set[str] = set()
        """Runs ended with a uid of their own whose cgroups are being emptied: the uid is
        released once nothing of the run is left (``_finish_sweeps``)."""
        self._trees = ProcessTrees(
            self.cluster, self.state_dir, self.max_pids, self.isolate, self.max_run_pids
        )
        if self._pool is not None and self._trees.hierarchy is None:
            # A uid is given back once every process of its run is gone, and only the run's
            # own processes may be killed for that: its cgroups say which (issue 35).
            raise ValueError(
                f"uid_range: a uid per owner needs cgroups on this machine "
                f"({self._trees.problem}), to end every process of a run, and only those, "
                "before its uid goes to another run; set run_as to one account instead"
            )
        discovery = discover_gpus(self.gpus, self.gpu_source)
        self.gpu_notice = discovery.notice
        """One line: the GPUs found and how (``flotilla up`` shows it)."""
        self._node = with_gpus(local_node(self.node_name, gpus=0), discovery)
        self._gpu_source = discovery.source
        self._gpu_devices = discovery.devices
        """The devices discovered, by index (none when told a count: indices are used then)."""
        try:
            sharing = GpuSharing(self.gpu_sharing)
        except ValueError:
            known = ", ".join(sharing.value for sharing in GpuSharing)
            raise ValueError(
                f"gpu_sharing: expected one of {known}, got {self.gpu_sharing!r}"
            ) from None
        self._gpu_monitor = sharing is GpuSharing.MONITOR
        self._mps: gpu_mps.MpsDaemons | None = None
        if sharing is GpuSharing.MPS and discovery.inventory is not None:
            inventory = discovery.inventory
            memory = int(inventory.memory or 0)
            devices = discovery.devices or tuple(  # told a count: CUDA's indices
                GpuDevice(index, "GPU", str(index), memory, 0, "", None)
                for index in range(inventory.count)
            )
            self._mps = gpu_mps.MpsDaemons(
                gpu_mps.mps_base(self.state_dir),
                devices,
                {device.index: device.memory_total for device in devices},
            )
            try:
                self.gpu_notice += "; " + self._mps.check()
            except GpuUnavailable as error:
                raise ValueError(f"gpu_sharing: {error}") from None
        self._lock = threading.RLock()
        self._runs: dict[str, Run] = {}
        self._changes = ChangeLog()
        self._unsynced: set[Path] = set()
        """Run records rewritten without fsync since the monitor last synced them."""
        self._reaping: list[subprocess.Popen[bytes]] = []
        """Supervisors killed once their cancelled replica was over, not reaped yet."""
        self._closed = False
        self._starters: dict[str, threading.Thread] = {}
        """Runs being started in the background (``dispatch``), by their starter thread."""
        self._run_locks = RunLocks()
        """Start and adoption of a run, serialised with other processes (``run_lock.py``)."""
        self._load()
        self._stopping = threading.Event()
        self._monitor = threading.Thread(
            target=self._watch, name=f"flotilla-local-{self.cluster}", daemon=True
        )
        self._monitor.start()
        self._gpu_sampler: GpuSampler | None = None
        if self._gpu_source is not None:
            self._gpu_sampler = GpuSampler(
                f"cluster {self.cluster}",
                self._gpu_source,
                self.gpu_sample_interval,
                self._gpu_request,
                self._apply_gpu_sample,
            )
            self._gpu_sampler.start()

    # --- the Backend protocol -------------------------------------------------------------

    def inventory(self) -> Inventory:
        with self._lock:
            self._check_open()
            active = tuple(run_id for run_id, run in self._runs.items() if not run.state.terminal)
            return Inventory(self.cluster, (self._node,), self.clock(), active)

    def dispatch(self, request: DispatchRequest) -> DispatchResult:
        """Record the run and return it ``pending``; its replicas start on a thread of their
        own (``_start_run``), so a dispatch of 10,000 replicas holds up neither the caller
        (the scheduling loop) nor the cancels, logs and polls of other runs. The run is
        ``running`` once every supervisor is on record and the gate open."""
        with self._lock:
            self._check_open()
            directory = run_directory(self._state, request.run_id)
            prepared_before = directory.is_dir()  # by a process that may have died doing so
            locked = request.run_id not in self._runs and RUN_ID_PATTERN.match(request.run_id)
            if locked:
                self._run_locks.take(directory)  # until the gate is open (``_start_run``)
            try:
                run, payload, relative = self._record(request, prepared_before)
            except BaseException:
                if locked:
                    self._run_locks.release(directory)
                raise
            if payload is None:  # a repeat: the run exists
                if locked:
                    self._run_locks.release(directory)
                return run.result
            run.starting = True
            self._runs[request.run_id] = run
            self._changes.observe(run.run_id, run.state)
            starter = threading.Thread(
                target=self._start_run,
                args=(run, request, payload, relative, directory if locked else None),
                name=f"flotilla-local-start-{request.run_id}",
                daemon=True,
            )
            self._starters[request.run_id] = starter
            starter.start()
            return run.result

    def _record(
        self, request: DispatchRequest, prepared_before: bool = False
    ) -> tuple[Run, CommandPayload | None, PurePosixPath | None]:
        """The run ``request`` asks for, on disk before any process exists, with its payload
        and working dir; or the run already known by that id, without (a repeat).
        ``prepared_before``: the run's directory existed, so a process may have died while it
        prepared the run (its uid claimed, its scratch dir made, no record yet): that claim is
        taken over and that scratch dir removed, not left behind (issue 35)."""
        existing = self._known(request.run_id)
        if existing is not None:
            check_same_job(existing.result, request)
            # A repeat after a crash: the caller may not know the run's state (it may
            # have ended while nobody watched), so the next poll reports it.
            self._changes.mark(request.run_id)
            return existing, None, None
        check_request(request, self.cluster, (self._node,), TASK_NAME_LIMITS["local"])
        payload = command_payload_of(request, "local")
        relative = local_environment.check_working_dir(
            payload.working_dir, self._allowed, self.any_working_dir
        )
        mapped = self._accounts.identity_for(request.queue, request.owner)
        pooled = mapped is None and self._pool is not None
        if prepared_before and self._scratch_runs:
            local_environment.remove_scratch_dirs(self.cluster, request.run_id)
        identity = mapped or (
            self._claim(request, prepared_before) if self._pool else self._account
        )
        try:
            scratch = None
            if self._scratch_runs:
                scratch = local_environment.make_scratch(self.cluster, request.run_id, identity)
            run = local_starting.record_run(
                request,
                run_directory(self._state, request.run_id),
                identity,
                scratch,
                self.clock(),
            )
            run.gpu_shares = gpu_telemetry.shares_of(
                [(p.task, p.gpu_ids) for p in request.placements], request.resources
            )
        except BaseException:
            if self._pool is not None and pooled and identity is not None:
                self._pool.release(identity.uid, request.run_id)  # no process ran as it
            raise
        return run, payload, relative

    def _claim(self, request: DispatchRequest, prepared_before: bool) -> Identity:
        """A uid of the range for the run: its owner's (``owner_uids``), else one of its
        own. Raises ``BackendUnavailable`` when none can be had now."""
        assert self._pool is not None
        if self.owner_uids is None:
            return self._pool.claim(request.run_id, take_over=prepared_before)
        return local_identity.claim_owners_uid(
            self._pool, self.owner_uids, self._owner_uid_cache, request.owner or "", request.run_id
        )

    def _start_run(
        self,
        run: Run,
        request: DispatchRequest,
        payload: CommandPayload,
        relative: PurePosixPath | None,
        locked: Path | None,
    ) -> None:
        """The starter thread of a dispatch: start the run's replicas outside the backend's
        lock, then (under it) record them and open the gate — or abandon the start when the
        run was cancelled meanwhile — and give back the run's lock (``locked``)."""
        decision = "abandon"
        try:
            decision = self._start(
                run,
                request,
                payload,
                relative,
                guard=self._lock,
                decide=lambda: "abandon" if run.stop is not None else "go",
            )
        except BaseException as error:  # nothing may be left starting forever
            log.exception("run %s: could not start its replicas", run.run_id)
            with self._lock:
                for replica in run.replicas:
                    if replica.supervisor is None and not replica.finished:
                        replica.finish(None, error=f"could not start: {error}")
        finally:
            with self._lock:
                if decision == "go":
                    # Every supervisor is on disk and the gate open: the commands run.
                    run.state, run.started_at = BackendRunState.RUNNING, self.clock()
                run.starting = False
                self._starters.pop(run.run_id, None)
                self._refresh(run)
                self._save_soon(run)
                self._changes.observe(run.run_id, run.state)
                if locked is not None:
                    self._run_locks.release(locked)

    def add_replicas(self, request: DispatchRequest) -> DispatchResult:
        """``ReplicaGrowth``: start the placements the run does not have yet, in its working
        dir, with a start gate of their own (``gate-N``, N the replicas it had), so that a
        crash while they start leaves none of them running untracked."""
        with self._lock:
            starter = self._starters.get(request.run_id)
        if starter is not None:
            starter.join()  # the run's own start first: growth follows it
        with self._lock:
            self._check_open()
            run = self._get(request.run_id)
            added = new_placements(run.result, request)
            if not added:
                return run.result
            self._refresh(run)
            if run.state.terminal or run.stop is not None:
                raise DispatchRejected(
                    f"run {request.run_id} has ended or is stopping: no replica can join it"
                )
            check_request(request, self.cluster, (self._node,), TASK_NAME_LIMITS["local"])
            payload = command_payload_of(request, "local")
            relative = local_environment.check_working_dir(
                payload.working_dir, self._allowed, self.any_working_dir
            )
            joining = [Replica(placement) for placement in added]
            gate = run.directory / f"gate-{len(run.replicas)}"
            run.replicas.extend(joining)
            run.result = replace(run.result, placements=run.result.placements + added)
            run.gpu_shares += gpu_telemetry.shares_of(
                [(p.task, p.gpu_ids) for p in added], request.resources
            )
            save_run(run)  # before any process exists, as a dispatch does
            self._start(run, request, payload, relative, joining, gate)
            run.failures_unchecked = True  # one may have failed to start
            self._changes.mark(run.run_id)
            return run.result

    def _start(
        self,
        run: Run,
        request: DispatchRequest,
        payload: CommandPayload,
        relative: PurePosixPath | None,
        replicas: Sequence[Replica] | None = None,
        gate: Path | None = None,
        guard: AbstractContextManager[Any] | None = None,
        decide: Callable[[], str] = lambda: "go",
    ) -> str:
        """Start ``replicas`` (default: all of the run's) in the run's working dir (its
        scratch dir, or the backend's, with the payload's ``relative`` part), through
        ``local_starting.start_replicas``: identity, log cap, cgroups, start gate (opened
        under ``guard`` as ``decide`` says). The gate's decision in force."""
        assert self.working_dir is not None
        base = run.scratch or self.working_dir
        return local_starting.start_replicas(
            run,
            request,
            payload,
            base if relative is None else base / relative,
            make_working_dir=run.scratch is not None and not (relative and relative.is_absolute()),
            passthrough=self.env_passthrough,
            log_limit=self._log_limit,
            trees=self._trees,
            replicas=replicas,
            gate=gate,
            guard=contextlib.nullcontext() if guard is None else guard,
            decide=decide,
            device_env=self._device_env(run, request),
        )

    def _device_env(
        self, run: Run, request: DispatchRequest
    ) -> Callable[[ReplicaPlacement], dict[str, str]]:
        """A replica's GPU variables, set after the job's: its devices by UUID, and under
        ``gpu_sharing: mps`` its daemon's (started for the run's account with its share's
        limits first; ``GpuUnavailable`` when it cannot be: the replica is not started)."""
        devices, daemons = self._gpu_devices, self._mps
        identity = run.identity
        uid = os.getuid() if identity is None else identity.uid
        gid = os.getgid() if identity is None else identity.gid

        def env(placement: ReplicaPlacement) -> dict[str, str]:
            found = visible_devices(devices, placement.gpu_ids)
            if daemons is not None:
                found.update(daemons.client_env(request, placement, uid, gid))
            return found

        return env

    def cancel(self, request: CancelRequest) -> CancelResult:
        with self._lock:
            self._check_open()
            run = self._known(request.run_id)
            if run is None:
                message = f"no run {request.run_id!r} on this backend; nothing to cancel"
                return CancelResult(request.run_id, CancelOutcome.UNKNOWN_RUN, message)
            self._refresh(run)
            if run.state.terminal:
                outcome, message = CancelOutcome.ALREADY_FINISHED, f"run already {run.state}"
            elif run.stop is not None:
                outcome = CancelOutcome.ALREADY_STOPPING
                message = f"run is already stopping: {run.stop.message}"
            else:
                grace = self.grace_period if request.grace_period is None else request.grace_period
                polite = signal.Signals[request.signal] if request.signal else signal.SIGTERM
                self._begin_stop(run, Stop("cancel", request.reason, self.clock(), grace), polite)
                outcome, message = CancelOutcome.STOPPING, f"{polite.name} sent to every replica"
            return CancelResult(request.run_id, outcome, message, run.status())

    def status(self, request: StatusRequest) -> RunStatus:
        with self._lock:
            self._check_open()
            run = self._get(request.run_id)
            self._refresh(run)
            return run.status()

    def poll(self) -> list[RunStatus]:
        with self._lock:
            self._check_open()
            self._refresh_all()
            return [self._runs[run_id].status() for run_id in self._changes.drain()]

    def logs(self, request: LogsRequest) -> LogChunk:
        with self._lock:
            self._check_open()
            run = self._get(request.run_id)
            self._refresh(run)
            index = pick_replica(run.result.placements, request.task, request.replica)
            path = run.log_file(run.replicas[index], request.stream.value)
            terminal = run.state.terminal
        data, size = read_log_slice(path, request.offset, request.limit)
        next_offset = request.offset + len(data)
        complete = terminal and next_offset >= size
        return LogChunk(request.run_id, request.stream, request.offset, next_offset, data, complete)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            starting = list(self._starters.values())
        for starter in starting:  # a start under way ends with its gate decided
            starter.join()
        self._stopping.set()
        self._monitor.join()
        if self._gpu_sampler is not None:
            self._gpu_sampler.close()  # and NVML with it
        if self.stop_runs_on_close:
            self._stop_everything()
        with self._lock:
            self._reap_supervisors()
            self._finish_sweeps(wait=SWEEP_SECONDS)
            self._trees.close()
            for run in self._runs.values():
                if run.record_stale:
                    self._save_soon(run)
        self._sync_records()
        if self.stop_runs_on_close and self._mps is not None:
            self._mps.stop_all()  # their clients are gone; runs left running keep them

    @property
    def isolation_notice(self) -> str | None:
        """One line saying what of a job's requests this machine does not enforce (no
        cgroups, no PID namespaces), or ``None``; ``flotilla up`` shows it at start."""
        return self._trees.notice()

    # --- internals ------------------------------------------------------------------------

    @property
    def _state(self) -> Path:
        assert self.state_dir is not None
        return self.state_dir

    def _check_open(self) -> None:
        if self._closed:
            raise BackendClosed(f"the local backend of cluster {self.cluster!r} is closed")

    def _get(self, run_id: str) -> Run:
        run = self._known(run_id)
        if run is None:
            raise UnknownRun(run_id)
        return run

    def _load(self) -> None:
        """Adopt the runs of an earlier backend over the same state dir (one another
        process is starting right now is adopted when first asked about)."""
        for run_id in saved_run_ids(self._state):
            with contextlib.suppress(BackendUnavailable):
                self._adopt(run_id)
        if self._pool is not None:
            used = [run for run in self._runs.values() if run.identity is not None]
            for run in sorted(used, key=lambda run: run.finished_at or float("inf")):
                assert run.identity is not None
                self._pool.note_used(run.identity.uid)
            self._pool.release_stale(self._holds)

    def _holds(self, run_id: str, uid: int) -> bool:
        """Whether the run ``run_id`` of this state dir holds ``uid`` (not released yet)."""
        try:
            run = self._known(run_id) if RUN_ID_PATTERN.match(run_id) else None
        except RunBusy:  # another process is starting or adopting it: held (issue 35)
            return True
        if run is None or run.identity is None:
            return False
        return run.identity.uid == uid and run.holds_identity

    def _run_lock(self, run_id: str) -> contextlib.AbstractContextManager[None]:
        """The run's lock across processes (``run_lock.py``) while this backend starts or
        adopts it; none for a run it holds already (or an id that names no directory)."""
        if run_id in self._runs or not RUN_ID_PATTERN.match(run_id):
            return contextlib.nullcontext()
        return self._run_locks.hold(run_directory(self._state, run_id))

    def _adopt(self, run_id: str) -> Run | None:
        """Take over the run another backend object recorded in the state dir, if any."""
        directory = run_directory(self._state, run_id)
        if not directory.is_dir():
            return None
        with self._run_lock(run_id):
            return self._adopt_locked(run_id)

    def _adopt_locked(self, run_id: str) -> Run | None:
        run = Run.load(run_directory(self._state, run_id))
        if run is None:
            return None
        self._runs[run_id] = run
        if run.state.terminal:
            self._give_back_identity(run)  # the earlier backend may have died before
        else:
            if not run.gate_file().exists():
                # The earlier backend died while starting this run: let it run only if
                # every replica's process is on record, else make sure none ever does.
                tracked = all(
                    r.pid is not None or r.finished or r.supervisor is not None
                    for r in run.replicas
                )
                claim_gate(str(run.gate_file()), "go" if tracked else "abandon")
            if run.state is BackendRunState.PENDING and local_ending.gate_open(run):
                # Its starter died between the gate and the record that says so.
                run.state, run.started_at = BackendRunState.RUNNING, self.clock()
                self._save_soon(run)
            self._refresh(run)
            self._changes.mark(run_id)
        return run

    def _known(self, run_id: str) -> Run | None:
        """The run, adopted from the state dir when another backend object started it since
        this one loaded (a replica sharing the state dir that took over the lease)."""
        run = self._runs.get(run_id)
        if run is None and RUN_ID_PATTERN.match(run_id):
            run = self._adopt(run_id)
        return run

    def _watch(self) -> None:
        while not self._stopping.wait(self.monitor_interval):
            with self._lock:
                self._refresh_all()
                self._reap_supervisors()
                self._finish_sweeps()
                active = [run_id for run_id, run in self._runs.items() if not run.state.terminal]
            if self._mps is not None:
                self._mps.retire(active)  # daemons whose runs all ended quit
            self._sync_records()
            self._trees.sweep()  # ended runs' cgroups, outside the lock

    def _gpu_request(self) -> gpu_telemetry.SampleRequest | None:
        """What the GPU sampler reads now (``gpu_sampler.py``, on its own thread): each running
        run holding GPUs, with every process of it (its cgroups' when there are, else its
        replicas' descendants), listed outside the lock."""
        with self._lock:
            if self._closed:
                return None
            runs = [r for r in self._runs.values() if r.gpu_shares and not r.state.terminal]
            found = [
                (
                    run.run_id,
                    tuple(r.pid for r in run.replicas if r.pid is not None and not r.finished),
                    self._trees.path(run),
                    run.gpu_shares,
                    run.started_at,
                )
                for run in runs
            ]
            previous = {run.run_id: run.gpu for run in runs if run.gpu is not None}
            now = self.clock()
        if not found:
            return None
        return gpu_telemetry.SampleRequest(
            tuple(
                gpu_telemetry.RunGpus(
                    run_id,
                    gpu_telemetry.run_pids(roots, self._in_cgroups(path)),
                    shares,
                    started_at,
                )
                for run_id, roots, path, shares, started_at in found
            ),
            previous,
            now,
            self._gpu_monitor,
        )

    def _in_cgroups(self, path: str) -> list[int] | None:
        """The processes in a run's cgroups (``None``: no cgroups here, or not readable)."""
        hierarchy = self._trees.hierarchy
        if hierarchy is None:
            return None
        try:
            return hierarchy.processes(path)
        except OSError:
            return None

    def _apply_gpu_sample(self, sample: gpu_telemetry.Sample) -> None:
        """Each running run's GPU use, reported by the next poll; with ``gpu_sharing:
        monitor``, stop (failed) a run over its GPU memory share."""
        with self._lock:
            for run_id, use in sample.uses.items():
                run = self._runs.get(run_id)
                if run is None or run.state.terminal or use == run.gpu:
                    continue
                run.gpu = use
                self._changes.mark(run_id)
                self._save_soon(run)
                reason = sample.over_share.get(run_id)
                if reason is not None and run.stop is None:
                    self._begin_stop(
                        run, Stop("gpu-memory", reason, self.clock(), self.grace_period)
                    )

    def _give_back_identity(self, run: Run) -> None:
        """A run that ended and holds a uid of its own: end whatever is left of it (daemons
        that left its process group), then release the uid (``_finish_sweeps``)."""
        if not run.holds_identity or run.run_id in self._sweeps:
            return
        assert run.identity is not None
        if not local_identity.claimed(self._state, run.identity.uid, run.run_id):
            # Released already (by another backend over the state dir, or one that died
            # before recording it): nothing of the run was left then.
            run.identity_released = True
            self._save_soon(run)
            return
        self._sweeps.add(run.run_id)

    def _finish_sweeps(self, wait: float = 0.0) -> None:
        """Kill what is left in the cgroups of every run being swept, and release the uid of
        each one with no process left (trying for up to ``wait`` seconds). Only the run's own
        processes, by its cgroups, never every process of the uid: another backend over the
        state dir may sweep the same run late, after the uid went to a new run, whose
        processes a kill by uid would end (issue 35: jobs ran twice). Without cgroups (a
        backend now told ``isolate: false``) nothing says a run is over: its uid stays held."""
        due = time.monotonic() + wait
        while self._sweeps:
            for run_id in list(self._sweeps):
                run = self._runs[run_id]
                if not self._trees.end_run(run):
                    continue
                self._sweeps.discard(run_id)
                assert run.identity is not None
                if self._pool is not None:
                    self._pool.release(run.identity.uid, run_id)
                else:  # the cluster stopped giving uids of their own: still give this one back
                    local_identity.release_claim(
                        local_identity.claims_directory(self._state),
                        local_identity.claim_owner(self._state),
                        run.identity.uid,
                        run_id,
                    )
                run.identity_released = True
                self._save_soon(run)
            if not self._sweeps or time.monotonic() >= due:
                return
            time.sleep(min(0.05, self.monitor_interval))

    def _save_soon(self, run: Run) -> None:
        """Save ``run`` now and make it durable within a monitor interval: how a run stops or
        ended is on the cancel's path, where an fsync costs milliseconds
        (``docs/performance.md``). A kill -9 of this process keeps the page cache, so a
        restarted backend reads the new record either way. Only a power loss can lose it, and
        then it loses the processes with it; the outcome itself stays durable in the
        supervisor's fsynced exit file, which a restart reads. Starting a run (pid and gate)
        keeps its synchronous fsyncs: that is what prevents a double run."""
        save_run(run, durable=False)
        run.record_stale, run.record_saved = False, time.monotonic()
        self._unsynced.add(record_path(run))

    def _sync_records(self) -> None:
        """fsync the records saved by ``_save_soon``, outside the lock (an fsync must not hold
        up a cancel or a poll)."""
        with self._lock:
            pending, self._unsynced = self._unsynced, set()
        for path in pending:
            sync_file(path)

    def _refresh_all(self) -> None:
        for run in self._runs.values():
            if not run.state.terminal:
                self._refresh(run)

    def _refresh(self, run: Run) -> None:
        """Bring ``run`` up to date: reap replicas, enforce limits, settle the final state."""
        if run.state.terminal or run.starting:  # its starter thread refreshes it at the end
            return
        now = self.clock()
        changed = False
        # Replicas of a batch supervisor are looked at only when an exit file may have come
        # or a supervisor ended (a run of 10,000 replicas is refreshed every monitor tick).
        alive = [local_ending.supervisor_alive(supervisor) for supervisor in run.supervisors]
        candidates: list[int] = []
        if run.supervisors and (
            not all(alive)
            or (local_ending.listing_due(run) and local_ending.exit_files_changed(run))
        ):
            local_ending.learn_pids(run)
            candidates = local_ending.maybe_ended(run, alive)
        elif not all(supervisor.pids_loaded for supervisor in run.supervisors):
            local_ending.learn_pids(run)  # each command's pid, once its supervisor wrote them
        loaded = sum(supervisor.pids_loaded for supervisor in run.supervisors)
        if loaded != run.pids_saved:  # the record on disk names them (``process_id``)
            run.pids_saved = loaded
            self._changes.mark(run.run_id)
            self._save_soon(run)
        for index in run.unbatched():  # those with a supervisor of their own (older versions)
            replica = run.replicas[index]
            if not replica.finished and local_ending.reap(run, replica, self._reaping):
                self._trees.ended(run, replica)
                changed = True
        for index in candidates:  # those of a batch whose exit file came, or whose supervisor
            replica = run.replicas[index]
            assert replica.supervisor is not None
            if local_ending.reap_supervised(run, replica, alive[replica.supervisor]):
                self._trees.ended(run, replica)
                changed = True
        if changed:
            run.failures_unchecked = True  # for ``stop_due``
        if local_ending.read_checkpoint(run, now):
            self._changes.mark(run.run_id)  # reported at the next poll, though still running
            self._save_soon(run)
        if run.stop is None:
            halt = local_ending.stop_due(run, now, self.grace_period)
            if halt is not None:
                self._begin_stop(run, halt)
        if local_ending.kill_overdue(run, now):
            changed = True
        if run.all_finished:
            run.settle(now)
            self._reaping.extend(s.process for s in run.supervisors if s.process is not None)
            self._trees.settled(run)
            if run.scratch is not None:
                shutil.rmtree(run.scratch, ignore_errors=True)
            self._give_back_identity(run)
            changed = True
        if changed:
            self._changes.observe(run.run_id, run.state)
            run.record_stale = True
        if run.record_stale and (
            run.state.terminal or time.monotonic() - run.record_saved >= RECORD_SECONDS
        ):
            self._save_soon(run)

    def _reap_supervisors(self) -> None:
        self._reaping = local_ending.reap_supervisors(self._reaping)

    def _begin_stop(self, run: Run, stop: Stop, polite: signal.Signals = signal.SIGTERM) -> None:
        run.stop = stop
        local_ending.signal_replicas(run, polite)
        self._changes.mark(run.run_id)
        self._save_soon(run)  # signal first, persist after: the stop starts at once

    def _stop_everything(self) -> None:
        with self._lock:
            active = [run for run in self._runs.values() if not run.state.terminal]
            for run in active:
                self._refresh(run)
                if run.stop is None and not run.state.terminal:
                    stop = Stop("cancel", "backend closed", self.clock(), self.grace_period)
                    self._begin_stop(run, stop)
        deadline = time.monotonic() + self.grace_period + 5.0
        while active and time.monotonic() < deadline:
            with self._lock:
                for run in active:
                    self._refresh(run)
                active = [run for run in active if not run.state.terminal]
            time.sleep(self.monitor_interval)


def make_local_backend(**config: Any) -> LocalBackend:
    """The entry-point factory: ``state_dir`` and ``working_dir`` may be strings,
    ``env_passthrough`` a list."""
    for key in ("state_dir", "working_dir"):
        if isinstance(config.get(key), str):
            config[key] = Path(config[key])
    if isinstance(config.get("env_passthrough"), list):
        config["env_passthrough"] = tuple(config["env_passthrough"])
    return LocalBackend(**config)
