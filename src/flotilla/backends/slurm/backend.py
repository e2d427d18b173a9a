"""The Slurm backend: each run is one batch job on a real Slurm cluster, driven by its clients.

The truth lives in Slurm: a run's job is named after the run id and carries a marker in its
comment (``marker.py``) naming the Flotilla cluster, the job and the placements, so a fresh
backend object finds every active run of its cluster with one ``squeue`` (adoption) and a
repeated dispatch finds the job it already submitted (idempotence). Output files and a small
run record live in ``output_dir``, a directory the Slurm nodes write and Flotilla reads.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flotilla.backends.common import (
    ChangeLog,
    check_request,
    check_same_job,
    checkpoint_env,
    command_payload_of,
    pick_replica,
    read_log_slice,
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
    ReplicaStatus,
    RunStatus,
    StatusRequest,
    UnknownRun,
)
from flotilla.backends.slurm.commands import SlurmClients, SlurmJob, SlurmNode, SlurmRefused
from flotilla.backends.slurm.marker import (
    STOP_MAX_RUNTIME,
    Marker,
    decode,
)
from flotilla.backends.slurm.nodes import node_info
from flotilla.backends.slurm.runs import RunFiles, build_status, status_of
from flotilla.backends.slurm.script import batch_script, replica_file, sbatch_options
from flotilla.model.names import TASK_NAME_LIMITS
from flotilla.model.node_info import NodeInfo
from flotilla.model.run_resources import RunResources

log = logging.getLogger(__name__)

DEFAULT_GRACE = 30.0
"""Seconds between SIGTERM and SIGKILL when a cancel names none (Slurm's default KillWait)."""


REFRESH_AGE = 0.2
"""Seconds one squeue read stays good for the calls that follow it."""

REFUSED_AT_SUBMIT = {"BadConstraints"}
"""A job sbatch refused still shows in squeue as FAILED with this reason: it never existed
for Flotilla (the dispatch raised DispatchRejected)."""


def default_output_dir(cluster: str) -> Path:
    base = os.environ.get("FLOTILLA_STATE_DIR") or Path.home() / ".local/state/flotilla"
    return Path(base) / "backends" / cluster / "slurm-output"


@dataclass(frozen=True)
class _Seen:
    """A run as last read from Slurm (or from its record once Slurm forgot it)."""

    marker: Marker
    job: SlurmJob | None
    status: RunStatus


class SlurmBackend:
    """One Slurm cluster. Settings are documented in docs/backends.md (section ``slurm``)."""

    name = "slurm"

    def __init__(
        self,
        cluster: str = "slurm",
        slurm_conf: str | Path | None = None,
        partition: str | None = None,
        bin_dir: str | Path | None = None,
        output_dir: str | Path | None = None,
        working_dir: str | Path | None = None,
        grace_period: float = DEFAULT_GRACE,
        command_timeout: float = 15.0,
        monitor_interval: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cluster = cluster
        self.partition = partition
        self.grace_period = grace_period
        self.output_dir = Path(output_dir) if output_dir else default_output_dir(cluster)
        self.files = RunFiles(self.output_dir, cluster)
        self.working_dir = Path(working_dir) if working_dir else Path.cwd()
        self.clients = SlurmClients(
            str(slurm_conf) if slurm_conf else None,
            str(bin_dir) if bin_dir else None,
            command_timeout,
        )
        self._clock = clock
        self._lock = threading.RLock()
        self._seen: dict[str, _Seen] = {}
        self._changes = ChangeLog()
        self._polled = False
        self._last_refresh: float | None = None
        self._last_found: dict[str, _Seen] = {}
        self._node_cache: tuple[NodeInfo, ...] | None = None
        self._measured: dict[str, RunResources | None] = {}
        """Run → what its Slurm job used, read from ``sacct`` once it ended (None: nothing)."""
        self._tracked: set[str] = set()
        """Runs whose changes the next poll reports: dispatched here, or any after a poll."""
        self._closed = threading.Event()
        self._monitor_interval = monitor_interval
        self._monitor = threading.Thread(
            target=self._watch, name=f"slurm-monitor-{cluster}", daemon=True
        )
        self._monitor.start()

    def __repr__(self) -> str:
        return f"SlurmBackend(cluster={self.cluster!r}, {self.clients.where})"

    # --- the contract ---------------------------------------------------------------------

    def inventory(self) -> Inventory:
        self._check_open()
        with self._lock:
            self._node_cache = None
            infos = self._nodes()
            jobs = self._refresh()
        active = tuple(sorted(run for run, seen in jobs.items() if not seen.status.state.terminal))
        return Inventory(self.cluster, infos, heartbeat=self._clock(), active_runs=active)

    def _nodes(self) -> tuple[NodeInfo, ...]:
        """The usable nodes, as of the last ``inventory()`` (dispatch checks placements
        against them without asking sinfo each time)."""
        if self._node_cache is None:
            nodes = [node for node in self.clients.nodes() if self._in_partition(node)]
            self._node_cache = tuple(info for node in nodes if (info := node_info(node)))
        return self._node_cache

    def _in_partition(self, node: SlurmNode) -> bool:
        return self.partition is None or self.partition in node.partitions

    def dispatch(self, request: DispatchRequest) -> DispatchResult:
        self._check_open()
        check_run_id(request.run_id)
        with self._lock:
            if self._last_refresh is None:
                self._refresh()
            known = self._lookup(request.run_id, fresh=False)
            if known is not None:
                result = self._result(known.marker)
                check_same_job(result, request)
                return result
            check_request(request, self.cluster, self._nodes(), TASK_NAME_LIMITS["slurm"])
            payload = command_payload_of(request, "slurm")
            marker = Marker(
                cluster=self.cluster,
                run_id=request.run_id,
                job=request.job,
                dispatched_at=float(int(self._clock())),
                placements=request.placements,
                max_runtime=request.max_runtime,
            )
            output = self.files.directory(request.run_id)
            output.mkdir(parents=True, exist_ok=True)
            working_dir = self.working_dir / (payload.working_dir or ".")
            environment = {
                **request.env,
                **payload.env,
                "FLOTILLA_JOB": request.job,
                "FLOTILLA_RUN": request.run_id,
                "FLOTILLA_CLUSTER": self.cluster,
                **checkpoint_env(self.files.checkpoint_file(request.run_id)),
            }
            self.files.write_record(marker, job_id=None)
            try:
                job_id = self.clients.submit(
                    batch_script(
                        request, payload, output, environment, sibling_grace=self.grace_period
                    ),
                    sbatch_options(
                        request,
                        comment=marker.encode(),
                        output=output,
                        working_dir=working_dir,
                        partition=self.partition,
                    ),
                )
            except SlurmRefused as error:
                self.files.forget(request.run_id)
                raise DispatchRejected(f"placements: Slurm refused the job: {error}") from None
            self.files.write_record(marker, job_id=job_id)
            log.info("run %s submitted to Slurm as job %d", request.run_id, job_id)
            status = RunStatus(
                run_id=request.run_id,
                job=request.job,
                cluster=self.cluster,
                state=BackendRunState.PENDING,
                dispatched_at=marker.dispatched_at,
                replicas=tuple(
                    ReplicaStatus(
                        p.task, p.replica, p.node, BackendRunState.PENDING, engine_id=str(job_id)
                    )
                    for p in request.placements
                ),
            )
            self._seen[request.run_id] = _Seen(marker, None, status)
            self._tracked.add(request.run_id)
            self._last_refresh = -math.inf  # the next call reads squeue: the job is new there
            self._changes.observe(request.run_id, BackendRunState.PENDING)
            return self._result(marker)

    def status(self, request: StatusRequest) -> RunStatus:
        self._check_open()
        with self._lock:
            return self._current(request.run_id).status

    def poll(self) -> list[RunStatus]:
        self._check_open()
        with self._lock:
            seen = self._refresh()
            if not self._polled:
                # Adoption: the first poll reports every run of this cluster still active in
                # Slurm; ended ones are the scheduler's to ask about (it does, by status).
                self._polled = True
                for run, item in seen.items():
                    if item.status.state.terminal:
                        self._changes.remember(run, item.status.state)
                    else:
                        self._changes.mark(run)
            return [self._seen[run].status for run in self._changes.drain() if run in self._seen]

    def cancel(self, request: CancelRequest) -> CancelResult:
        self._check_open()
        with self._lock:
            self._refresh()
            known = self._lookup(request.run_id)
            if known is None:
                return CancelResult(
                    request.run_id, CancelOutcome.UNKNOWN_RUN, f"no run {request.run_id!r}"
                )
            if known.status.state.terminal:
                return CancelResult(
                    request.run_id,
                    CancelOutcome.ALREADY_FINISHED,
                    f"run {request.run_id} already {known.status.state.value}",
                    known.status,
                )
            if known.marker.stop is not None:
                return CancelResult(
                    request.run_id,
                    CancelOutcome.ALREADY_STOPPING,
                    f"run {request.run_id} is already stopping ({known.marker.stop})",
                    known.status,
                )
            grace = self.grace_period if request.grace_period is None else request.grace_period
            polite = request.signal.removeprefix("SIG") if request.signal else "TERM"
            self._stop(known, request.reason, grace, polite)
            return CancelResult(
                request.run_id,
                CancelOutcome.STOPPING,
                f"stopping run {request.run_id}",
                self._seen[request.run_id].status,
            )

    def logs(self, request: LogsRequest) -> LogChunk:
        self._check_open()
        with self._lock:
            known = self._current(request.run_id)
        placements = known.marker.placements
        index = pick_replica(placements, request.task, request.replica)
        path = self.files.directory(request.run_id) / replica_file(
            placements[index], request.stream
        )
        data, size = read_log_slice(path, request.offset, request.limit)
        at_end = request.offset + len(data) >= size
        return LogChunk(
            run_id=request.run_id,
            stream=request.stream,
            offset=request.offset,
            next_offset=request.offset + len(data),
            data=data,
            complete=known.status.state.terminal and at_end,
        )

    def close(self) -> None:
        self._closed.set()
        if self._monitor.is_alive() and self._monitor is not threading.current_thread():
            self._monitor.join(timeout=5)

    # --- reading Slurm --------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise BackendClosed(f"the slurm backend of cluster {self.cluster!r} is closed")

    def _refresh(self, max_age: float = REFRESH_AGE) -> dict[str, _Seen]:
        """Read every job of this cluster from ``squeue``, enforce deadlines, note changes.

        Reuses a read younger than ``max_age`` seconds: one squeue serves the status, poll and
        logs calls of one scheduling cycle."""
        now = time.monotonic()
        if self._last_refresh is not None and now - self._last_refresh < max_age:
            return self._last_found
        jobs = self.clients.jobs()
        self._last_refresh = now
        now = self._clock()
        found: dict[str, _Seen] = {}
        with self._lock:
            for job in sorted(jobs, key=lambda job: job.job_id):
                marker = decode(job.comment)
                if marker is None or marker.cluster != self.cluster or marker.run_id != job.name:
                    continue
                if job.reason in REFUSED_AT_SUBMIT:
                    continue
                item = _Seen(marker, job, status_of(marker, job, self.files, self._clock()))
                found[marker.run_id] = item
                before = self._seen.get(marker.run_id)
                self._seen[marker.run_id] = item
                if self._polled or marker.run_id in self._tracked:
                    self._changes.observe(marker.run_id, item.status.state)
                    checkpoint = item.status.last_checkpoint_at
                    if checkpoint is not None and (
                        before is None or before.status.last_checkpoint_at != checkpoint
                    ):
                        self._changes.mark(marker.run_id)  # news, though its state is not
            for run, item in list(self._seen.items()):
                if run not in found and not item.status.state.terminal and item.job is not None:
                    # Active when last seen, gone from squeue now: ended past MinJobAge.
                    self._seen.pop(run)
                    forgotten = self._from_completion_log(run)
                    if forgotten is not None:
                        self._seen[run] = forgotten
                        self._changes.observe(run, forgotten.status.state)
            for item in found.values():
                self._enforce(item, now)
            self._measure()
            self._last_found = found
        return found

    def _measure(self) -> None:
        """Read from Slurm's accounting what the runs that ended since the last look used
        (one ``sacct`` for all of them), and give each ended run's status its figures."""
        ended = {
            run: item.job.job_id
            for run, item in self._seen.items()
            if item.status.state.terminal and item.job is not None and run not in self._measured
        }
        figures = self.clients.accounting(list(ended.values())) if ended else {}
        for run, job_id in ended.items():
            self._measured[run] = figures.get(job_id)
        for run, item in list(self._seen.items()):
            measured = self._measured.get(run)
            if measured is not None and measured.measured and item.status.resources is None:
                status = replace(item.status, resources=measured)
                self._seen[run] = _Seen(item.marker, item.job, status)

    def _current(self, run_id: str) -> _Seen:
        """The run as Slurm has it now (squeue read first; call under the lock), or
        ``UnknownRun``."""
        self._refresh()
        known = self._lookup(run_id)
        if known is None:
            raise UnknownRun(run_id)
        return known

    def _lookup(self, run_id: str, fresh: bool = True) -> _Seen | None:
        """This cluster's run ``run_id``: from squeue, else its record and the completion log.

        ``fresh``: the caller has just read squeue; otherwise a run with a record is looked
        for in squeue again before the completion log is asked."""
        if not RUN_ID_PATTERN.match(run_id):
            return None
        known = self._seen.get(run_id)
        if known is not None:
            return known
        record = self.files.read_record(run_id)
        if record is None:
            return None
        if record[1] is None:
            # Submit did not complete (a crash, or Slurm refused): nothing runs under this id.
            return None
        if not fresh:
            self._refresh(max_age=0.0)
            if run_id in self._seen:
                return self._seen[run_id]
        forgotten = self._from_completion_log(run_id)
        if forgotten is not None:
            self._seen[run_id] = forgotten
        return forgotten

    def _from_completion_log(self, run_id: str) -> _Seen | None:
        record = self.files.read_record(run_id)
        if record is None:
            return None
        marker, job_id = record
        ended = [job for job in self.clients.completed({run_id}) if job.job_id == job_id]
        if ended:
            job = ended[-1]
            return _Seen(marker, job, status_of(marker, job, self.files, self._clock()))
        status = build_status(
            marker,
            BackendRunState.LOST,
            self.files,
            message=f"Slurm no longer knows job {job_id} and its completion log has no record",
            slurm_job=job_id,
        )
        return _Seen(marker, None, status)

    # --- stopping -------------------------------------------------------------------------

    def _stop(self, known: _Seen, reason: str, grace: float, polite: str = "TERM") -> None:
        """Write why and when the hard kill is due into the job's comment, then SIGTERM (or
        ``polite``: a preempted job's ``preemption.signal``, e.g. ``USR1``).

        SIGTERM goes to every step, the replicas' processes (``scancel --signal=TERM``, not
        the batch shell and its ``srun``: see ``SlurmClients.cancel``), so a replica's trap runs
        and what it prints is kept in its output; the SIGKILL at the deadline is this
        backend's, to the whole job (any backend object's: the deadline is in Slurm). A plain
        ``scancel`` would end the job at once and leave the processes to Slurm's KillWait,
        whatever the grace. A job still pending is simply cancelled."""
        if known.job is None:
            self._refresh(max_age=0.0)
            known = self._seen.get(known.marker.run_id, known)
        if known.job is None:
            raise BackendUnavailable(f"slurm: job of run {known.marker.run_id} not in squeue yet")
        marker = known.marker.stopping(reason, self._clock() + grace)
        self.clients.set_comment(known.job.job_id, marker.encode())
        self.files.record_stop(marker)
        if known.status.state is BackendRunState.PENDING:
            self.clients.cancel(known.job.job_id)
        else:
            self.clients.cancel(known.job.job_id, signal=polite)
        self._seen[marker.run_id] = _Seen(marker, known.job, known.status)

    def _enforce(self, item: _Seen, now: float) -> None:
        """max_runtime and the hard kill after a stop's grace, both from the marker."""
        job, marker = item.job, item.marker
        if job is None or item.status.state.terminal:
            return
        if marker.stop is None and marker.max_runtime is not None and job.start_time:
            if (
                job.state in ("RUNNING", "COMPLETING")
                and now - job.start_time >= marker.max_runtime
            ):
                self._stop(item, STOP_MAX_RUNTIME, self.grace_period)
        elif marker.kill_at is not None and now >= marker.kill_at:
            self.clients.cancel(job.job_id, signal="KILL")

    def _watch(self) -> None:
        """Enforce deadlines without anyone calling: runs with a max_runtime or a stop."""
        while not self._closed.wait(self._monitor_interval):
            with self._lock:
                watched = any(
                    not item.status.state.terminal
                    and (item.marker.max_runtime is not None or item.marker.stop is not None)
                    for item in self._seen.values()
                )
            if not watched:
                continue
            try:
                self._refresh()
            except Exception as error:  # the monitor must outlive any error
                log.warning("slurm monitor of %s: %s", self.cluster, error)

    def _result(self, marker: Marker) -> DispatchResult:
        return DispatchResult(
            run_id=marker.run_id,
            job=marker.job,
            cluster=self.cluster,
            dispatched_at=marker.dispatched_at,
            placements=marker.placements,
        )


def check_run_id(run_id: str) -> None:
    """Run ids name files under ``output_dir``: check them before any path is built."""
    if not RUN_ID_PATTERN.match(run_id):
        raise DispatchRejected(
            f"run_id: {run_id!r} must be 1-200 characters of letters, digits, '.', '_'"
            " or '-', starting with a letter or digit"
        )


def make_slurm_backend(**settings: Any) -> SlurmBackend:
    """The entry-point factory (``flotilla.backends`` → ``slurm``): fleet-file settings."""
    return SlurmBackend(**settings)
