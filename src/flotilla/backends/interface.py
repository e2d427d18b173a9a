"""The backend boundary: how Flotilla hands a scheduled run to the engine that runs a cluster.

One ``Backend`` object serves one cluster (Michelangelo's federated client, per cluster). The
scheduler decides *where* a job runs (an ``Assignment``); the backend only starts, watches,
stops and reports runs there. Every call takes one frozen request dataclass and returns a named
result dataclass, so adding a field never breaks a backend or a caller.

Failure semantics, common to every backend:

* A call **raises** only when it did nothing:

  - ``BackendUnavailable`` — the cluster or its engine cannot be reached now (transient).
    Retry later with the same request; every mutating call is idempotent, so a retry after a
    timeout whose outcome is unknown is safe. ``BackendClosed`` (a subclass) after ``close()``.
    ``RunBusy`` (a subclass): this one run cannot be acted on now (another process is starting
    or adopting it); the cluster answers for its other runs, so go on with them.
  - ``DispatchRejected`` — the request can never succeed on this backend (invalid or
    unsupported payload, a node or device the cluster does not have, a run id reused for
    another job). Do not retry; fail the run with the message, which names the field.
  - ``UnknownRun`` — ``status``/``logs`` of a run id this backend has no record of. During
    reconciliation after a restart the scheduler should treat such a run as lost.

* Anything that happens to a run once it exists is **returned** as its ``RunStatus``: a
  command that cannot start (missing program, bad working directory), a non-zero exit, a kill
  by signal, a ``max_runtime`` overrun, a process that vanished. Such a run is ``failed`` or
  ``lost`` with a ``message`` a person can act on; the call itself succeeds.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from flotilla.model.gpu_use import GpuUse
from flotilla.model.node_info import NodeInfo
from flotilla.model.run_resources import RunResources

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
"""Run ids become file and process names, so they are restricted to a safe alphabet."""


class BackendError(Exception):
    """Base of every error a backend raises."""


class BackendUnavailable(BackendError):
    """The cluster cannot be reached now; retry the same (idempotent) request later."""


class BackendClosed(BackendUnavailable):
    """The backend object was closed; make a new one (it will know the old one's runs)."""


class RunBusy(BackendUnavailable):
    """This run is held by another process right now (the ``local`` backend's run lock: a
    replica sharing its state dir is starting or adopting it, or was stopped while doing so).
    Only this run: ask about the cluster's other runs, and about this one next cycle."""


class DispatchRejected(BackendError, ValueError):
    """The dispatch request can never succeed here; the message names the offending field."""


class UnknownRun(BackendError, LookupError):
    """No record of this run id on this backend."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no run {run_id!r} on this backend")


class UnknownReplica(ValueError, LookupError):
    """A logs request names a task or replica the run does not have (the API's 404)."""


class BackendRunState(StrEnum):
    """The state of one run as its backend sees it (the store keeps its own, durable
    ``flotilla.store.RunState``, which the service moves from these reports).

    ``lost``: the backend can no longer tell what happened (the process vanished while nobody
    watched, the node disappeared). The scheduler decides whether to requeue.
    """

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"

    @property
    def terminal(self) -> bool:
        return self not in (BackendRunState.PENDING, BackendRunState.RUNNING)


@dataclass(frozen=True)
class ReplicaPlacement:
    """Where one replica of one task runs: the part of a ``Placement`` a backend needs."""

    task: str
    replica: int
    node: str
    gpu_ids: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.task}/{self.replica}"


@dataclass(frozen=True)
class Inventory:
    """What a cluster has, as its backend reports it.

    ``heartbeat``: when the backend last confirmed the cluster is alive (seconds since the
    epoch, backend clock); a stale heartbeat is how the scheduler spots an unreachable cluster.
    ``active_runs``: ids of the runs not yet in a terminal state.
    """

    cluster: str
    nodes: tuple[NodeInfo, ...]
    heartbeat: float
    active_runs: tuple[str, ...] = ()


@dataclass(frozen=True)
class DispatchRequest:
    """Start one run of a job on this backend's cluster, one process per placement.

    ``payload`` is the job's raw payload; the backend validates it for ``job_type``.
    ``env`` is set for every replica (below the payload's own env, which is the user's word);
    backend-owned variables (``FLOTILLA_*``, ``CUDA_VISIBLE_DEVICES``) always win.
    ``max_runtime``: seconds after which the run is stopped and reported failed.
    ``resources``: what one replica of each task asks for, by task name (``{"main": {"cpu": 2,
    "memory": 2**30, "gpu": 1}}``, memory in bytes), for engines that reserve resources
    themselves (Slurm, Ray, Kubernetes); empty when the caller does not say, and then such a
    backend asks its engine for its defaults. ``local`` and ``sim`` ignore it. ``labels`` and
    ``tolerations`` (each a mapping of ``key``/``operator``/``value``/``effect``) are the job's
    own; backends whose engine enforces them (``kubernetes``) pass them on, others ignore them.
    ``queue`` and ``owner`` (the name of the token that submitted it): the job's, for a
    backend that runs jobs as an account mapped from them (``local``'s ``run_as_accounts``).
    """

    run_id: str
    job: str
    cluster: str
    placements: tuple[ReplicaPlacement, ...]
    payload: Mapping[str, Any] | None
    job_type: str = "command"
    env: Mapping[str, str] = field(default_factory=dict)
    max_runtime: float | None = None
    resources: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    queue: str | None = None
    owner: str | None = None
    preemption_signal: str | None = None
    """The job's ``preemption.signal`` (``SIGUSR1``), for a backend whose engine fixes how a
    run is stopped when it starts it (Ray: every stop of the run sends it); ``None``: the job
    declares none (SIGTERM). Backends that take the signal with each stop read
    ``CancelRequest.signal`` instead."""
    preemption_grace: float | None = None
    """The job's ``preemption.grace`` in seconds, for the same backends (Ray's stop wait);
    ``None``: the backend's ``grace_period``."""


@dataclass(frozen=True)
class DispatchResult:
    """The run as dispatched. Dispatching the same run id again returns an equal result."""

    run_id: str
    job: str
    cluster: str
    dispatched_at: float
    placements: tuple[ReplicaPlacement, ...]


@dataclass(frozen=True)
class CancelRequest:
    """Stop a run: SIGTERM (or the engine's equivalent), then a hard kill after the grace.

    ``reason`` ends up in the run's message (e.g. ``"preempted by team-a/train-7"``).
    ``grace_period``: seconds between the polite and the hard stop; ``None`` = backend default.
    """

    run_id: str
    reason: str = "cancelled"
    grace_period: float | None = None
    signal: str | None = None
    """The polite signal's name (``SIGUSR1``: a preempted job's ``preemption.signal``, to
    checkpoint); ``None`` = SIGTERM. Backends that cannot choose send their own."""


class CancelOutcome(StrEnum):
    """What a cancel did. Only ``stopping`` changed anything; the rest are not errors."""

    STOPPING = "stopping"
    """The stop was started; the run becomes ``cancelled`` once every replica is gone."""
    ALREADY_STOPPING = "already-stopping"
    ALREADY_FINISHED = "already-finished"
    UNKNOWN_RUN = "unknown-run"


@dataclass(frozen=True)
class CancelResult:
    run_id: str
    outcome: CancelOutcome
    message: str
    status: RunStatus | None = None
    """The run's status after the call; ``None`` for an unknown run."""


@dataclass(frozen=True)
class StatusRequest:
    run_id: str


@dataclass(frozen=True)
class ReplicaStatus:
    """One replica of a run. ``process_id``: its process group on ``local``, else ``None``."""

    task: str
    replica: int
    node: str
    state: BackendRunState
    exit_code: int | None = None
    process_id: int | None = None
    engine_id: str | None = None
    """The engine's own name for the replica, as its own tools show it (``flotilla describe``):
    the Ray submission id, the Slurm job id, the Kubernetes Job name and pod index, the local
    process group id. Never a path on the server."""


@dataclass(frozen=True)
class RunStatus:
    """A run's state and what explains it.

    ``exit_code``: 0 on success; the failing replica's code on failure; negative when it was
    killed by that signal (``-9``: SIGKILL), as Python's ``subprocess`` reports it; ``None``
    when there is no code (cancelled, lost, never started). Times are seconds since the epoch.
    """

    run_id: str
    job: str
    cluster: str
    state: BackendRunState
    dispatched_at: float
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    message: str = ""
    replicas: tuple[ReplicaStatus, ...] = ()
    over_limit: bool = False
    """The backend ended it for exceeding a limit the job itself set (its ``max_runtime``, its
    memory request, its GPU memory share): the job's failure even when a signal ended it,
    never the node's."""
    gpu: GpuUse | None = None
    """Its GPU use as the backend last measured it (``gpu_telemetry.py``); None: not measured
    (no GPU, or a backend that does not sample)."""
    last_checkpoint_at: float | None = None
    """When the job last reported "checkpointed now" (``flotilla.checkpoint()`` touching
    ``FLOTILLA_CHECKPOINT_FILE``); ``None``: never, or the backend cannot tell (``local``,
    ``slurm``, and ``ray`` with a ``checkpoint_dir`` report it; ``kubernetes`` cannot read a
    pod's files)."""
    resources: RunResources | None = None
    """CPU seconds and peak memory its processes used, measured when it ended (the local
    backend from each replica's cgroup, Slurm from its accounting); ``None``: not measured
    (a run still going, a backend that cannot tell)."""


def signal_words(number: int) -> str:
    """A signal in a run's message, its number and name: ``signal 9 (SIGKILL)`` (the number
    alone for one this machine does not name). Every backend reports a kill by signal ``N`` as
    the exit code ``-N`` (``RunStatus.exit_code``)."""
    try:
        return f"signal {number} ({signal.Signals(number).name})"
    except ValueError:
        return f"signal {number}"


class LogStream(StrEnum):
    STDOUT = "stdout"
    STDERR = "stderr"


@dataclass(frozen=True)
class LogsRequest:
    """Read one replica's output from byte ``offset`` (the first replica when none is named).

    To follow, call again with the previous chunk's ``next_offset`` until ``complete``.
    """

    run_id: str
    stream: LogStream = LogStream.STDOUT
    offset: int = 0
    task: str | None = None
    replica: int | None = None
    limit: int = 1 << 16


@dataclass(frozen=True)
class LogChunk:
    """Bytes ``[offset, next_offset)`` of a replica's stream.

    ``complete``: the run is terminal and this chunk reaches the end, so a follower stops.
    """

    run_id: str
    stream: LogStream
    offset: int
    next_offset: int
    data: bytes
    complete: bool

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


@runtime_checkable
class Backend(Protocol):
    """The engine that runs one cluster. See the module docstring for failure semantics.

    Implementations are thread-safe: the scheduler loop, the API and a log follower may call
    one backend concurrently.
    """

    name: str
    """The backend's registered name (``local``, ``sim``…)."""
    cluster: str
    """The cluster this backend object serves; requests for another cluster are rejected."""

    def inventory(self) -> Inventory:
        """The cluster's nodes and a fresh heartbeat. Raises ``BackendUnavailable``."""
        ...

    def dispatch(self, request: DispatchRequest) -> DispatchResult:
        """Start the run: one replica per placement. Idempotent by ``run_id``.

        A run id seen before (by this object or, through the backend's state, by an earlier
        one) starts nothing and returns an equal result; the same id for another job raises
        ``DispatchRejected``. Returns once every replica has been started or has failed to
        start (a start failure is the run's status, not an exception).
        """
        ...

    def cancel(self, request: CancelRequest) -> CancelResult:
        """Begin stopping the run and return without waiting for it to end. Idempotent.

        Cancelling a finished, already-cancelling or unknown run changes nothing and says so
        in ``outcome``. A stopped run ends ``cancelled`` even if it exits 0 on SIGTERM; the
        hard kill follows the grace period without another call.
        """
        ...

    def status(self, request: StatusRequest) -> RunStatus:
        """The run's current status. Raises ``UnknownRun`` for a run id it never had."""
        ...

    def poll(self) -> list[RunStatus]:
        """The current status of every run whose state changed since the previous ``poll``.

        The scheduler's loop calls this instead of asking for every run. After a restart the
        first poll reports every run that was still active in the previous instance's state,
        so the caller can reconcile (runs whose process vanished come back as ``lost``).
        """
        ...

    def logs(self, request: LogsRequest) -> LogChunk:
        """A chunk of one replica's stdout or stderr. Raises ``UnknownRun``; ``UnknownReplica``
        (a ``ValueError``) for a replica the run does not have (``common.pick_replica``)."""
        ...

    def close(self) -> None:
        """Release the backend's threads and handles. Idempotent.

        Runs are not stopped (unless the backend is configured to, e.g. ``local``'s
        ``stop_runs_on_close``): they keep running on the cluster and a new backend object over
        the same state adopts them (that is how the service survives a restart). Other calls
        after ``close`` raise ``BackendClosed``.
        """
        ...


@runtime_checkable
class ReplicaGrowth(Protocol):
    """A backend that can add replicas to a run while it runs: how a non-strict gang (one
    that started with ``min_member`` of its replicas) grows to full size as room appears.

    A backend without it runs a non-strict gang with the members it started with; the service
    refuses such a gang at submission when every cluster it may run on lacks this
    (``docs/jobs.md``)."""

    def add_replicas(self, request: DispatchRequest) -> DispatchResult:
        """Start the placements of ``request`` that its run does not have yet; ``request`` is
        the run's whole dispatch as it stands now (every placement, old and new, so that the
        new replicas see the run's new ``WORLD_SIZE`` and their ranks). Idempotent: a
        placement the run has (by task and replica) starts nothing. Raises ``UnknownRun`` for
        a run this backend never had, ``DispatchRejected`` for a run that has ended or a
        placement the cluster cannot hold, ``BackendUnavailable`` as ``dispatch`` does."""
        ...


def can_grow(backend: object) -> bool:
    """Whether ``backend`` can add replicas to a running run (``ReplicaGrowth``): a backend
    whose settings rule growth out (``kubernetes`` in ``kueue`` mode) says so with a false
    ``grows`` attribute."""
    return isinstance(backend, ReplicaGrowth) and bool(getattr(backend, "grows", True))


def new_placements(
    existing: DispatchResult, request: DispatchRequest
) -> tuple[ReplicaPlacement, ...]:
    """The placements of ``request`` (the run's whole dispatch after growing) that the run
    ``existing`` does not have yet. Raises ``DispatchRejected`` when ``request`` is not that
    run grown: another job or cluster, or a placement it has moved elsewhere."""
    known = {(p.task, p.replica): p for p in existing.placements}
    wanted = {(p.task, p.replica): p for p in request.placements}
    moved = [key for key, placement in known.items() if wanted.get(key) != placement]
    if (existing.job, existing.cluster) != (request.job, request.cluster) or moved:
        raise DispatchRejected(
            f"run_id: {request.run_id!r} runs job {existing.job!r} with other placements; "
            "growing a run only adds replicas"
        )
    return tuple(p for p in request.placements if (p.task, p.replica) not in known)


def check_grown_in_order(existing: DispatchResult, request: DispatchRequest) -> None:
    """Refuse (``DispatchRejected``) a growth whose request does not keep the run's
    placements first, in their order: for engines whose replica is known by its position
    (its ``RANK``, a Kubernetes completion index), growing only appends."""
    have = len(existing.placements)
    if tuple(request.placements[:have]) != tuple(existing.placements):
        raise DispatchRejected(
            f"placements: growing run {request.run_id!r} must keep its {have} placements "
            "first, in their order, and add the new ones after them"
        )
