"""How the ``local`` backend starts a run: its record, then one supervisor per batch of up to
``BATCH`` replicas (one for most runs), then the gate that lets them start the commands, each
by a ``vfork`` or ``fork`` from itself (``_supervise.py``, ``_spawn.py``).

The order is what prevents a double run and an untracked process: the record is on disk
before the first process exists, every supervisor's pid is on disk (one write for all: linear
in the replicas, issue 23, where a write per replica made ``replicas: 10000`` take hours)
before the gate opens, and every command lives and dies with its supervisor. One interpreter
per batch, not per replica, and no Python in a command's child: 10,000 replicas fit in memory
and under ``pid_max``, and start in about half a minute on two shared cores
(``docs/performance.md``, sixth pass). What each supervisor is told travels in its launch
spec, never in its own arguments or environment (see ``_supervise.py``).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from flotilla.backends.common import checkpoint_env, rendezvous_envs
from flotilla.backends.interface import DispatchRequest, DispatchResult, ReplicaPlacement
from flotilla.backends.local import environment as local_environment
from flotilla.backends.local import processes
from flotilla.backends.local._supervise import claim_gate
from flotilla.backends.local.gpu_sources import GpuUnavailable
from flotilla.backends.local.identity import Identity
from flotilla.backends.local.records import Replica, Run, Supervisor, save_run
from flotilla.backends.local.tree import ProcessTrees
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


BATCH = 1000
"""Replicas per supervisor: one starts them all by ``fork`` and pumps their output. Bounded so
that a supervisor's descriptors (two pipes and two logs per replica) stay within the usual
hard limit, and so that a huge run starts on several cores at once."""


def batch_size() -> int:
    """``BATCH``, or fewer where the descriptor limit a supervisor inherits (its hard limit,
    which it raises itself to) would not hold four per replica."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        return BATCH
    return max(1, min(BATCH, (hard - 64) // 4))


def private_mounts(trees: ProcessTrees, identity: Identity | None) -> bool:
    """Whether the run's batches get their own ``/tmp``, ``/dev/shm`` and ``/proc``
    (``_private_mounts.py``): where mount namespaces work, for a job that runs as a user other
    than root. A job running as root (the server's identity, or ``run_as: root``) keeps the
    host's: it could undo them."""
    return trees.private_mounts and identity is not None and identity.uid != 0


def tmpfs_size(requests: Sequence[float | None]) -> int | None:
    """The size of a batch's ``/tmp`` and ``/dev/shm``: the memory its replicas asked for
    together (what is written there is charged to the writer's memory cgroup in any case);
    ``None`` (the kernel's default, half the machine's memory) when one asked for none."""
    if not requests or any(asked is None for asked in requests):
        return None
    return int(sum(asked for asked in requests if asked is not None))


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
    guard: AbstractContextManager[Any] | None = None,
    decide: Callable[[], str] = lambda: "go",
    device_env: Callable[[ReplicaPlacement], Mapping[str, str]] | None = None,
) -> str:
    """Start a supervisor per batch of ``BATCH`` replicas (one for most runs), record every
    supervisor (once), then open the gate: each then forks its replicas' commands. A crash
    before the gate opens ends the gate pipe: the supervisors abandon the run, and the next
    backend reports it lost; after it, every command lives in its supervisor's PID namespace
    (or dies with its supervisor, ``PR_SET_PDEATHSIG``), so a recorded supervisor accounts for
    all of them. A replica whose cgroup, or whose supervisor, cannot be made is finished with
    why. ``trees``: each replica's cgroups and the PID namespace (``local/tree.py``).
    ``replicas``/``gate``: only these (replicas joining a running run, ``ReplicaGrowth``),
    behind a gate file of their own; by default every replica, behind the run's gate.
    ``guard`` (the backend's lock) is held while the record is saved and the gate decided:
    ``decide`` says ``go``, or ``abandon`` (the run was cancelled while it started). Returns
    the decision in force. ``device_env``: a replica's variables for its GPU share (its
    devices by UUID, ``gpu_mps``'s), set last like the backend's own; one that raises
    ``GpuUnavailable`` finishes the replica unstarted, with why."""
    gate_path = run.gate_file() if gate is None else gate
    identity = run.identity
    shared_env = {**local_environment.base_env(passthrough, identity, run.scratch), **request.env}
    reporting = checkpoint_env(run.checkpoint_file())
    common: dict[str, Any] = {
        "argv": payload.argv(),
        "uid": None if identity is None else identity.uid,
        "gid": None if identity is None else identity.gid,
        "groups": None if identity is None else list(identity.groups),
        "working_dir": str(working_dir),
        "make_working_dir": make_working_dir,
        "shown_working_dir": payload.working_dir or ".",
        "working_dir_hint": local_environment.entering_hint(identity),
        "gate_file": str(gate_path),
        "log_usage_file": str(run.log_usage_file()),
        "log_limit": log_limit,
        "log_note": log_note(log_limit),
        "pid_namespace": trees.pid_namespace,
        "private_mounts": private_mounts(trees, identity),
        "keep_paths": [
            str(path) for path in (run.directory, run.scratch, working_dir) if path is not None
        ],
    }
    position = {id(replica): index for index, replica in enumerate(run.replicas)}
    startable: list[tuple[int, dict[str, Any]]] = []
    memory: dict[int, float | None] = {}
    rendezvous = rendezvous_envs(request, "127.0.0.1")  # every replica is on this machine
    with contextlib.suppress(OSError):  # a replica's own cgroup then fails, saying why
        trees.prepare_run(run)
    for replica in run.replicas if replicas is None else replicas:
        try:
            devices = device_env(replica.placement) if device_env else {}
        except GpuUnavailable as error:  # e.g. its MPS limits could not be applied
            replica.finish(None, error=str(error))
            continue
        env = {
            **shared_env,
            **rendezvous[replica.placement],
            **payload.env,
            **local_environment.backend_env(request, replica.placement),
            **reporting,
            **devices,
        }
        asked = request.resources.get(replica.placement.task, {}).get("memory")
        memory[position[id(replica)]] = float(asked) if asked else None
        try:
            joins = trees.prepare(run, replica, request)
        except OSError as error:
            replica.finish(None, error=f"could not make its cgroup: {error.strerror}")
            continue
        startable.append(
            (
                position[id(replica)],
                {
                    "env": env,
                    "exit_file": str(run.exit_file(replica)),
                    "stdout": str(run.log_file(replica, "stdout")),
                    "stderr": str(run.log_file(replica, "stderr")),
                    "cgroups": [str(join) for join in joins],
                },
            )
        )
    size = batch_size()
    gate_read, gate_write = os.pipe()
    try:
        try:
            for first in range(0, len(startable), size):
                batch = startable[first : first + size]
                number = len(run.supervisors)
                spec = {
                    **common,
                    "gate_fd": gate_read,
                    "pids_file": str(run.pids_file(number)),
                    "tmpfs_size": tmpfs_size([memory[index] for index, _ in batch]),
                    "replicas": [item for _, item in batch],
                }
                try:
                    process = processes.start_supervised(
                        spec,
                        stdout=Path(os.devnull),
                        stderr=run.supervisor_log(number),
                        gate_fd=gate_read,
                    )
                except OSError as error:  # its strerror only: no path of the server's
                    for index, _ in batch:
                        run.replicas[index].finish(
                            None, error=f"could not start: {error.strerror or error}"
                        )
                    continue
                members = [index for index, _ in batch]
                supervisor = Supervisor(
                    process.pid, processes.start_ticks(process.pid), members, process=process
                )
                run.supervisors.append(supervisor)
                for index in members:
                    run.replicas[index].supervisor = number
        finally:
            os.close(gate_read)
        with contextlib.nullcontext() if guard is None else guard:
            save_run(run)  # every supervisor durable before the gate opens: no untracked one
            return claim_gate(str(gate_path), decide())
    finally:
        os.close(gate_write)  # wakes every supervisor (to abandon, without a gate file)
