"""The ``ray`` backend: runs Flotilla's runs as Ray jobs through a Ray head's Jobs API.

One Ray job per replica (see ``jobs``), pinned to the node Flotilla chose by the node-id label
selector, with the replica's resources reserved for its entrypoint. The truth is Ray's: the
backend keeps only caches, so a new object (another scheduler replica, a restart after
kill -9) knows every run of its cluster from its first call. See ``docs/backends.md`` (ray).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from flotilla.backends.common import (
    ChangeLog,
    any_payload_of,
    check_request,
    check_same_job,
    pick_replica,
    reported_checkpoint,
)
from flotilla.backends.interface import (
    RUN_ID_PATTERN,
    BackendClosed,
    BackendRunState,
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
    RunStatus,
    StatusRequest,
    UnknownRun,
    check_grown_in_order,
    new_placements,
)
from flotilla.backends.ray.client import RayJobsClient
from flotilla.backends.ray.jobs import (
    Marker,
    RayReplica,
    build_submission,
    read_replica,
    submission_id,
    user_output,
)
from flotilla.backends.ray.nodes import RayNode, read_nodes
from flotilla.backends.ray.runs import RunView, compose
from flotilla.model.names import RAY_TASK_NAME_MAX
from flotilla.model.payload import ContainerPayload, Payload

CLUSTER_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
TASK_PATTERN = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{RAY_TASK_NAME_MAX - 1}}}$")
"""A task name this backend puts in a submission id (``model/names.py``: the API refuses
longer ones at submission)."""


class RayBackend:
    """A Flotilla cluster backed by a Ray cluster (its head's dashboard ``address``).

    ``token``: sent as ``Authorization: Bearer`` (Ray's token authentication); never logged,
    printed or stored. ``grace_period``: seconds between Ray's SIGTERM and its SIGKILL when a
    run is stopped (set per Ray job at submit, as ``RAY_JOB_STOP_WAIT_TIME_S``) and after
    ``max_runtime`` (a job's ``preemption.grace`` wins for its own run, and its
    ``preemption.signal`` is sent first: ``relay.py``). ``request_timeout``: seconds any HTTP
    request to the head may take. ``node_refresh``: seconds a read of the node list is reused
    to check dispatches. ``checkpoint_dir``: a directory the Ray nodes and the scheduler both
    see (a shared file system; any directory when the Ray cluster is this machine): each run's
    ``FLOTILLA_CHECKPOINT_FILE`` is made there, and its time read back as the run's
    ``last_checkpoint_at``; ``None``: jobs get no checkpoint file.
    """

    name = "ray"

    def __init__(
        self,
        cluster: str,
        address: str,
        token: str | None = None,
        grace_period: float = 10.0,
        request_timeout: float = 30.0,
        node_refresh: float = 5.0,
        checkpoint_dir: str | Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(cluster, str) or not CLUSTER_PATTERN.match(cluster):
            raise ValueError(
                f"cluster: {cluster!r} must be 1-100 letters, digits, '.', '_' or '-' "
                "(it is part of every Ray submission id)"
            )
        if not isinstance(address, str) or not re.match(r"^https?://[^/\s]+", address):
            raise ValueError(
                f"address: {address!r} must be the Ray dashboard's URL, e.g. http://127.0.0.1:8265"
            )
        if token is not None and not isinstance(token, str):
            raise ValueError("token: must be a string")
        if checkpoint_dir is not None and (
            not isinstance(checkpoint_dir, str | Path) or not str(checkpoint_dir)
        ):
            raise ValueError(f"checkpoint_dir: {checkpoint_dir!r} must be a directory's path")
        for setting, value in (
            ("grace_period", grace_period),
            ("request_timeout", request_timeout),
            ("node_refresh", node_refresh),
        ):
            if not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{setting}: {value!r} must be a number >= 0")
        self.cluster = cluster
        self.address = address.rstrip("/")
        self.grace_period = float(grace_period)
        self.node_refresh = float(node_refresh)
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.clock = clock
        self._client = RayJobsClient(self.address, token, float(request_timeout) or 10.0)
        self._lock = threading.Lock()
        self._nodes: list[RayNode] = []
        self._nodes_read_at = float("-inf")
        self._known: dict[str, tuple[str, ...]] = {}
        """Run id → its replicas' submission ids (a cache; Ray is the record)."""
        self._reasons: dict[str, str] = {}
        self._stopped_pending: set[str] = set()
        """Submission ids stopped while Ray still held them ``PENDING``: Ray leaves such a job
        waiting and starts it once its resources free up, so it is stopped again then."""
        """Why this object stopped a run (Ray keeps no reason: after a restart it is lost)."""
        self._changes = ChangeLog()
        self._polled = False
        self._dispatched_here: set[str] = set()
        self._checkpoints: dict[str, float] = {}
        """Run id → the checkpoint time its last poll reported (a newer one is news)."""
        self._closed = False

    def __repr__(self) -> str:
        return f"RayBackend(cluster={self.cluster!r}, address={self.address!r})"

    # --- the Backend protocol ---

    def inventory(self) -> Inventory:
        self._check_open()
        nodes = self._read_nodes()
        runs = self._scan()
        active = tuple(
            sorted(
                run_id for run_id, view in runs.items() if not self._compose(view).state.terminal
            )
        )
        return Inventory(self.cluster, tuple(node.info for node in nodes), self.clock(), active)

    def dispatch(self, request: DispatchRequest) -> DispatchResult:
        self._check_open()
        if not RUN_ID_PATTERN.match(request.run_id) or request.cluster != self.cluster:
            check_request(request, self.cluster, ())  # raises, naming the field
        for index, placement in enumerate(request.placements):
            if not TASK_PATTERN.match(placement.task):
                raise DispatchRejected(
                    f"placements[{index}].task: {placement.task!r} must be letters, digits, "
                    "'.', '_' or '-' (it is part of the Ray submission id)"
                )
        existing = self._view_of_request(request)
        if existing is not None:
            if existing.complete:
                check_same_job(existing.result(), request)
                return existing.result()
            self._check_same_partial_run(existing, request)
        nodes = self._nodes_for(request)
        check_request(request, self.cluster, [node.info for node in nodes])
        payload = any_payload_of(request)
        if isinstance(payload, ContainerPayload):
            raise DispatchRejected(
                "type: 'container' jobs do not run on the ray backend (it runs command and ray "
                "jobs; a container job needs a cluster whose backend is kubernetes)"
            )
        dispatched_at = existing.result().dispatched_at if existing else self.clock()
        submitted = {marker.index for marker in existing.markers} if existing else set()
        self._submit(request, payload, nodes, dispatched_at, submitted)
        with self._lock:
            self._dispatched_here.add(request.run_id)
        return DispatchResult(
            run_id=request.run_id,
            job=request.job,
            cluster=self.cluster,
            dispatched_at=dispatched_at,
            placements=request.placements,
        )

    def add_replicas(self, request: DispatchRequest) -> DispatchResult:
        """``ReplicaGrowth``: one more Ray job per new placement, submitted as ``dispatch``
        submits a replica's, from the run's whole request as it stands now: a new replica's
        ``RANK`` is its position in it, its ``WORLD_SIZE`` the grown run's size, its
        ``MASTER_ADDR`` the first replica's node as before. Its marker counts the grown run's
        replicas, so a growth cut short by a crash reads as unfinished (the service hands it
        over again) and a fresh backend object finds every replica from Ray alone."""
        self._check_open()
        # Read with a listing, not the cache: another backend object may have grown it.
        view = self._scan().get(request.run_id)
        if view is None:
            raise UnknownRun(request.run_id)
        existing = view.result()
        added = new_placements(existing, request)
        if not added:
            return existing
        check_grown_in_order(existing, request)
        with self._lock:
            stopping = request.run_id in self._reasons
        failed = any(replica.state is BackendRunState.FAILED for replica in view.replicas)
        if stopping or failed or (view.complete and self._compose(view).state.terminal):
            raise DispatchRejected(
                f"run {request.run_id} has ended or is stopping: no replica can join it"
            )
        for index, placement in enumerate(request.placements):
            if placement in added and not TASK_PATTERN.match(placement.task):
                raise DispatchRejected(
                    f"placements[{index}].task: {placement.task!r} must be letters, digits, "
                    "'.', '_' or '-' (it is part of the Ray submission id)"
                )
        nodes = self._nodes_for(request)
        check_request(request, self.cluster, [node.info for node in nodes])
        payload = any_payload_of(request)
        if isinstance(payload, ContainerPayload):  # pragma: no cover - dispatch refused it
            raise DispatchRejected("type: 'container' jobs do not run on the ray backend")
        submitted = {
            index for index, placement in enumerate(request.placements) if placement not in added
        }
        self._submit(request, payload, nodes, existing.dispatched_at, submitted)
        self._changes.mark(request.run_id)
        return DispatchResult(
            run_id=request.run_id,
            job=request.job,
            cluster=self.cluster,
            dispatched_at=existing.dispatched_at,
            placements=request.placements,
        )

    def _submit(
        self,
        request: DispatchRequest,
        payload: Payload,
        nodes: Sequence[RayNode],
        dispatched_at: float,
        submitted: set[int],
    ) -> None:
        """One Ray job per placement of ``request`` whose index is not in ``submitted``; the
        run's replicas are then known (cached) as every placement of ``request``."""
        node_ids = {node.info.name: node.node_id for node in nodes}
        if self.checkpoint_dir is not None:
            self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        first = next(node for node in nodes if node.info.name == request.placements[0].node)
        master_addr = first.info.labels.get("ray.io/node-ip", first.info.name)
        for index, placement in enumerate(request.placements):
            if index in submitted:
                continue
            marker = Marker(
                cluster=self.cluster,
                run_id=request.run_id,
                job=request.job,
                task=placement.task,
                replica=placement.replica,
                node=placement.node,
                gpu_ids=placement.gpu_ids,
                dispatched_at=dispatched_at,
                max_runtime=request.max_runtime,
                replicas=len(request.placements),
                index=index,
            )
            submission = build_submission(
                request,
                payload,
                placement,
                marker,
                node_ids[placement.node],
                grace_period=self.grace_period,
                master_addr=master_addr,
                checkpoint_file=self._checkpoint_file(request.run_id),
            )
            self._client.submit(**submission.fields)
        with self._lock:
            self._known[request.run_id] = self._submission_ids(request.run_id, request.placements)

    @staticmethod
    def _check_same_partial_run(existing: RunView, request: DispatchRequest) -> None:
        """A dispatch interrupted half-way is completed only by the same run's request."""
        for marker in existing.markers:
            same = (
                marker.job == request.job
                and marker.replicas <= len(request.placements)
                and marker.index < len(request.placements)
                and request.placements[marker.index] == marker.placement
            )
            if not same:
                raise DispatchRejected(
                    f"run_id: {request.run_id!r} was already dispatched for job {marker.job!r} "
                    "with other placements; a run id names one attempt"
                )

    def cancel(self, request: CancelRequest) -> CancelResult:
        self._check_open()
        # A listing, not the cache: every replica, those another object added included.
        view = self._scan().get(request.run_id) if RUN_ID_PATTERN.match(request.run_id) else None
        if view is None:
            return CancelResult(
                request.run_id, CancelOutcome.UNKNOWN_RUN, f"no run {request.run_id!r} on Ray"
            )
        status = self._compose(view)
        if status.state.terminal:
            return CancelResult(
                request.run_id,
                CancelOutcome.ALREADY_FINISHED,
                f"run {request.run_id} already {status.state.value}",
                status,
            )
        with self._lock:
            stopping = request.run_id in self._reasons
            self._reasons.setdefault(request.run_id, request.reason)
        if stopping:
            return CancelResult(
                request.run_id, CancelOutcome.ALREADY_STOPPING, status.message, status
            )
        for replica in view.replicas:
            if not replica.state.terminal:
                sid = self._sid(request.run_id, replica.marker)
                if replica.state is BackendRunState.PENDING:
                    with self._lock:
                        self._stopped_pending.add(sid)
                self._client.stop(sid)
        after = self._compose(view)
        return CancelResult(
            request.run_id, CancelOutcome.STOPPING, f"stopping: {request.reason}", after
        )

    def status(self, request: StatusRequest) -> RunStatus:
        self._check_open()
        view = self._view(request.run_id)
        if view is None:
            raise UnknownRun(request.run_id)
        self._stop_what_must_stop(view)
        return self._compose(view)

    def poll(self) -> list[RunStatus]:
        self._check_open()
        runs = self._scan()
        reported: list[RunStatus] = []
        ended: list[str] = []  # finished runs whose checkpoint file is still there
        with self._lock:
            first, self._polled = not self._polled, True
        for run_id in sorted(runs):
            view = runs[run_id]
            self._stop_what_must_stop(view)
            status = self._compose(view)
            if first and status.state.terminal and run_id not in self._dispatched_here:
                self._changes.remember(run_id, status.state)  # finished before us: not news
            else:
                self._changes.observe(run_id, status.state)
            if not status.state.terminal:
                self._note_checkpoint(status)
            elif status.last_checkpoint_at is not None:
                ended.append(run_id)
        by_id = {run_id: runs[run_id] for run_id in runs}
        for run_id in self._changes.drain():
            if run_id in by_id:
                reported.append(self._compose(by_id[run_id]))
        for run_id in ended:  # read into the report of its end above, if that is news
            self._drop_checkpoint(run_id)
        return reported

    def logs(self, request: LogsRequest) -> LogChunk:
        self._check_open()
        if request.offset < 0 or request.limit <= 0:
            raise ValueError("offset must be >= 0 and limit > 0")
        view = self._view(request.run_id)
        if view is None:
            raise UnknownRun(request.run_id)
        index = pick_replica(view.placements, request.task, request.replica)
        # Read the state before the log: a run terminal now has all its output in the log.
        replica = view.replicas[index]
        terminal = replica.state.terminal
        if request.stream is LogStream.STDERR:
            # Ray keeps one log of both streams, served as stdout: were it stderr as well, a
            # reader of both streams (the SDK's default, the dashboard) got every line twice.
            return LogChunk(
                run_id=request.run_id,
                stream=request.stream,
                offset=request.offset,
                next_offset=request.offset,
                data=b"",
                complete=terminal,
            )
        submission = self._sid(request.run_id, replica.marker)
        log = self._client.logs(submission)
        data = user_output(log, submission, replica.entrypoint).encode()
        end = min(len(data), request.offset + request.limit)
        start = min(request.offset, len(data))
        return LogChunk(
            run_id=request.run_id,
            stream=request.stream,
            offset=request.offset,
            next_offset=max(end, request.offset),
            data=data[start:end],
            complete=terminal and end >= len(data),
        )

    def close(self) -> None:
        self._closed = True

    # --- reading Ray ---

    def _check_open(self) -> None:
        if self._closed:
            raise BackendClosed(f"the ray backend of cluster {self.cluster!r} is closed")

    def _read_nodes(self) -> list[RayNode]:
        nodes = read_nodes(self._client.nodes())
        with self._lock:
            self._nodes, self._nodes_read_at = nodes, time.monotonic()
        return nodes

    def _nodes_for(self, request: DispatchRequest) -> list[RayNode]:
        """The nodes to check a dispatch against: the recent read, unless it misses a node the
        request names (a node that joined since)."""
        with self._lock:
            nodes, fresh = self._nodes, time.monotonic() - self._nodes_read_at < self.node_refresh
        names = {node.info.name for node in nodes}
        if fresh and all(placement.node in names for placement in request.placements):
            return nodes
        return self._read_nodes()

    def _sid(self, run_id: str, marker: Marker) -> str:
        return submission_id(self.cluster, run_id, marker.task, marker.replica)

    def _submission_ids(
        self, run_id: str, placements: Sequence[ReplicaPlacement]
    ) -> tuple[str, ...]:
        return tuple(submission_id(self.cluster, run_id, p.task, p.replica) for p in placements)

    def _scan(self) -> dict[str, RunView]:
        """Every run of this cluster on Ray, read with one listing."""
        grouped: dict[str, list[RayReplica]] = {}
        for details in self._client.jobs():
            replica = read_replica(details)
            if replica is None or replica.marker.cluster != self.cluster:
                continue
            if getattr(details, "submission_id", None) != self._sid(
                replica.marker.run_id, replica.marker
            ):
                continue  # a marker copied onto another job: not ours
            grouped.setdefault(replica.marker.run_id, []).append(replica)
        runs = {
            run_id: RunView(run_id, tuple(sorted(replicas, key=lambda r: r.marker.index)))
            for run_id, replicas in grouped.items()
        }
        with self._lock:
            for run_id, view in runs.items():
                if view.complete:
                    self._known[run_id] = tuple(self._sid(run_id, m) for m in view.markers)
        return runs

    def _view(self, run_id: str) -> RunView | None:
        """The run as Ray has it now, or ``None`` when Ray has no job of it."""
        with self._lock:
            sids = self._known.get(run_id)
        if sids is None:
            return self._scan().get(run_id)
        replicas = []
        for sid in sids:
            details = self._client.info(sid)
            replica = read_replica(details) if details is not None else None
            if replica is not None and replica.marker.cluster == self.cluster:
                replicas.append(replica)
        if not replicas:
            return None
        return RunView(run_id, tuple(sorted(replicas, key=lambda r: r.marker.index)))

    def _view_of_request(self, request: DispatchRequest) -> RunView | None:
        """The replicas of this run id Ray already has (look up before submitting: Ray
        answers a duplicate submission id with an HTTP 500)."""
        with self._lock:
            known = request.run_id in self._known
        if known:
            return self._view(request.run_id)
        replicas = []
        for placement in request.placements:
            sid = submission_id(self.cluster, request.run_id, placement.task, placement.replica)
            details = self._client.info(sid)
            if details is None:
                continue
            replica = read_replica(details)
            if replica is None or replica.marker.cluster != self.cluster:
                raise DispatchRejected(
                    f"run_id: Ray already has a job {sid!r} that is not this cluster's run"
                )
            replicas.append(replica)
        if not replicas:
            return None
        return RunView(request.run_id, tuple(sorted(replicas, key=lambda r: r.marker.index)))

    # --- composing a run's status ---

    def _stop_what_must_stop(self, view: RunView) -> None:
        """A run whose replica failed fails as a whole: stop the replicas still going. A
        replica stopped while pending that Ray started since is stopped again."""
        failed = any(replica.state is BackendRunState.FAILED for replica in view.replicas)
        for replica in view.replicas:
            if replica.state.terminal:
                continue
            sid = self._sid(view.run_id, replica.marker)
            with self._lock:
                started_after_stop = (
                    replica.state is BackendRunState.RUNNING and sid in self._stopped_pending
                )
                if started_after_stop:
                    self._stopped_pending.discard(sid)
            if failed or started_after_stop:
                self._client.stop(sid)

    def _compose(self, view: RunView) -> RunStatus:
        with self._lock:
            reason = self._reasons.get(view.run_id)
        now = self.clock()
        status = compose(view, self.cluster, reason, now)
        path = self._checkpoint_file(view.run_id)
        if path is None:
            return status
        return replace(status, last_checkpoint_at=reported_checkpoint(path, status.started_at, now))

    # --- checkpoints (issue 28) ---

    def _checkpoint_file(self, run_id: str) -> Path | None:
        """The run's ``FLOTILLA_CHECKPOINT_FILE`` in ``checkpoint_dir`` (one for its replicas,
        as on ``local``), named like its Ray jobs so two Flotilla clusters never share one."""
        if self.checkpoint_dir is None:
            return None
        return self.checkpoint_dir / f"{self.cluster}--{run_id}.checkpoint"

    def _note_checkpoint(self, status: RunStatus) -> None:
        """A checkpoint newer than the one last noted makes the run news for this poll,
        though its state did not change (the local backend's way, ``local.py``)."""
        at = status.last_checkpoint_at
        if at is not None and at != self._checkpoints.get(status.run_id):
            self._checkpoints[status.run_id] = at
            self._changes.mark(status.run_id)

    def _drop_checkpoint(self, run_id: str) -> None:
        """A finished run's checkpoint file, once its end was reported (or was not news):
        nothing reads it any more."""
        self._checkpoints.pop(run_id, None)
        path = self._checkpoint_file(run_id)
        if path is not None:
            path.unlink(missing_ok=True)
