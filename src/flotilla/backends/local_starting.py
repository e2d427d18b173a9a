"""How the ``local`` backend starts a run: its record, then one supervisor per replica, then
the gate that lets their commands run (``_supervise.py``).

The order is what prevents a double run and an untracked process: the record is on disk
before the first process exists, every pid is on disk (one write for all replicas: linear in
the replicas, issue 23, where a write per replica made ``replicas: 10000`` take hours) before
the gate opens. What each supervisor is told travels in its launch spec, never in its own
arguments or environment (see ``_supervise.py``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flotilla.backends import local_environment, processes
from flotilla.backends._supervise import claim_gate
from flotilla.backends.common import rendezvous_env
from flotilla.backends.interface import DispatchRequest, DispatchResult
from flotilla.backends.local_identity import Identity
from flotilla.backends.local_records import Replica, Run, save_run
from flotilla.backends.local_tree import ProcessTrees
from flotilla.model.payload import CommandPayload
from flotilla.model.quantity import parse_quantity

DEFAULT_LOG_LIMIT = "1Gi"
"""What a run may write to its logs, all replicas and streams together (``log_limit``)."""


def log_limit_of(value: float | str | None) -> int | None:
    """The ``log_limit`` setting in bytes (``None``: no limit); ``ValueError`` naming it."""
    if value is None:
        return None
    try:
        limit = parse_quantity(value)
    except ValueError as error:
        raise ValueError(f"log_limit: {error}") from None
    if limit < 1:
        raise ValueError(f"log_limit: {value!r} must be at least 1 byte (or null: no limit)")
    return int(limit)


def log_note(limit: int | None) -> str:
    """The last line of a log that hit the cap (stated in the log, so ``logs`` shows it)."""
    if limit is None:
        return "[log capped]"
    return (
        f"[log capped at {bytes_text(limit)} for this run (the cluster's log_limit): the rest "
        "of its output was dropped]"
    )


def bytes_text(size: int) -> str:
    """``1 GiB``, ``1.5 MiB``, ``1000 bytes``."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.4g} {unit}"
    return f"{size} bytes"


def record_run(
    request: DispatchRequest,
    directory: Path,
    identity: Identity | None,
    scratch: Path | None,
    now: float,
) -> Run:
    """The run's record, on disk before any process exists (a crash after this leaves a run
    to call lost). On failure the scratch dir is removed."""
    run = Run(
        result=DispatchResult(
            run_id=request.run_id,
            job=request.job,
            cluster=request.cluster,
            dispatched_at=now,
            placements=request.placements,
        ),
        directory=directory,
        max_runtime=request.max_runtime,
        replicas=[Replica(placement) for placement in request.placements],
        scratch=scratch,
        identity=identity,
    )
    try:
        run.directory.mkdir(mode=0o700, exist_ok=True)
        save_run(run)
    except BaseException:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    return run


def start_replicas(
    run: Run,
    request: DispatchRequest,
    payload: CommandPayload,
    working_dir: Path,
    *,
    make_working_dir: bool,
    passthrough: tuple[str, ...],
    log_limit: int | None,
    trees: ProcessTrees,
    replicas: Sequence[Replica] | None = None,
    gate: Path | None = None,
) -> None:
    """Start a supervisor per replica, record every pid (once), then open the gate. A crash
    before the gate opens ends the gate pipe: the supervisors abandon the run, and the next
    backend reports it lost. A replica whose supervisor (or cgroup) cannot be made is finished
    with why. ``trees``: each replica's cgroups and PID namespace (``local_tree.py``).
    ``replicas``/``gate``: only these (replicas joining a running run, ``ReplicaGrowth``),
    behind a gate file of their own; by default every replica, behind the run's gate."""
    gate_path = run.gate_file() if gate is None else gate
    identity = run.identity
    shared_env = {**local_environment.base_env(passthrough, identity, run.scratch), **request.env}
    checkpoint = run.checkpoint_file()
    reporting = {} if checkpoint is None else {"FLOTILLA_CHECKPOINT_FILE": str(checkpoint)}
    common: dict[str, Any] = {
        "argv": payload.argv(),
        "uid": None if identity is None else identity.uid,
        "gid": None if identity is None else identity.gid,
        "groups": None if identity is None else list(identity.groups),
        "working_dir": str(working_dir),
        "make_working_dir": make_working_dir,
        "shown_working_dir": payload.working_dir or ".",
        "gate_file": str(gate_path),
        "log_usage_file": str(run.log_usage_file()),
        "log_limit": log_limit,
        "log_note": log_note(log_limit),
    }
    gate_read, gate_write = os.pipe()
    try:
        try:
            for replica in run.replicas if replicas is None else replicas:
                env = {
                    **shared_env,
                    # Every replica of a local run is on this machine.
                    **rendezvous_env(request, replica.placement, "127.0.0.1"),
                    **payload.env,
                    **local_environment.backend_env(request, replica.placement),
                    **reporting,
                }
                try:
                    joins, namespace = trees.prepare(run, replica, request)
                except OSError as error:
                    replica.finish(None, error=f"could not make its cgroup: {error.strerror}")
                    continue
                spec = {
                    **common,
                    "env": env,
                    "exit_file": str(run.exit_file(replica)),
                    "gate_fd": gate_read,
                    "cgroups": [str(join) for join in joins],
                    "pid_namespace": namespace,
                }
                try:
                    process = processes.start_supervised(
                        spec,
                        stdout=run.log_file(replica, "stdout"),
                        stderr=run.log_file(replica, "stderr"),
                        gate_fd=gate_read,
                    )
                except OSError as error:  # its strerror only: no path of the server's
                    replica.finish(None, error=f"could not start: {error.strerror or error}")
                    continue
                replica.attach(process, processes.start_ticks(process.pid))
        finally:
            os.close(gate_read)
        save_run(run)  # every pid durable before the gate opens: no untracked command
        claim_gate(str(gate_path), "go")
    finally:
        os.close(gate_write)  # wakes every supervisor (to abandon, without a gate file)
