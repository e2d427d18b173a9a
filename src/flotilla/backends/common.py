"""What every backend shares: request checks, run records on disk, and state-change tracking."""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from flotilla.backends.interface import (
    RUN_ID_PATTERN,
    BackendRunState,
    DispatchRejected,
    DispatchRequest,
    DispatchResult,
    ReplicaPlacement,
    UnknownReplica,
)
from flotilla.files import write_text_safely
from flotilla.model.names import NAME_MAX
from flotilla.model.node_info import NodeInfo
from flotilla.model.payload import CommandPayload, Payload, PayloadError, parse_payload


def check_request(
    request: DispatchRequest,
    cluster: str,
    nodes: Sequence[NodeInfo],
    task_name_max: int = NAME_MAX,
) -> None:
    """Reject, naming the field, what no backend of ``cluster`` could ever start.
    ``task_name_max``: the longest task name the backend can hold (``model/names.py``; the
    API refuses longer ones, but a spec stored before it did may still come): longer, and its
    run would never start, so it fails at once rather than being lost and re-queued."""
    if not RUN_ID_PATTERN.match(request.run_id):
        raise DispatchRejected(
            f"run_id: {request.run_id!r} must be 1-200 characters of letters, digits, '.', '_'"
            " or '-', starting with a letter or digit"
        )
    if request.cluster != cluster:
        raise DispatchRejected(
            f"cluster: {request.cluster!r} is not this backend's cluster {cluster!r}"
        )
    if not request.placements:
        raise DispatchRejected("placements: a run needs at least one replica")
    if request.max_runtime is not None and request.max_runtime <= 0:
        raise DispatchRejected(f"max_runtime: {request.max_runtime:g} must be > 0")
    by_name = {node.name: node for node in nodes}
    seen: set[tuple[str, int]] = set()
    for index, placement in enumerate(request.placements):
        where = f"placements[{index}]"
        if (placement.task, placement.replica) in seen:
            raise DispatchRejected(f"{where}: replica {placement.label} is placed twice")
        seen.add((placement.task, placement.replica))
        if len(placement.task) > task_name_max:
            raise DispatchRejected(
                f"{where}.task: a task name of {len(placement.task)} characters; this backend "
                f"holds at most {task_name_max} (docs/jobs.md, Names)"
            )
        node = by_name.get(placement.node)
        if node is None:
            raise DispatchRejected(
                f"{where}.node: {placement.node!r} is not a node of cluster {cluster!r} "
                f"(nodes: {', '.join(sorted(by_name))})"
            )
        for device in placement.gpu_ids:
            if not 0 <= device < node.gpu_count:
                raise DispatchRejected(
                    f"{where}.gpu_ids: device {device} does not exist on node {node.name!r} "
                    f"({node.gpu_count} GPUs)"
                )


def any_payload_of(request: DispatchRequest) -> Payload:
    """The request's payload, validated for its job type (``DispatchRejected`` naming the
    field)."""
    try:
        return parse_payload(request.job_type, request.payload)
    except PayloadError as error:
        raise DispatchRejected(str(error)) from None


def command_payload_of(request: DispatchRequest, backend: str) -> CommandPayload:
    """The ``command`` payload of a request to a backend that runs nothing else."""
    payload = any_payload_of(request)
    if not isinstance(payload, CommandPayload):
        raise DispatchRejected(
            f"type: {request.job_type!r} jobs do not run on the {backend} backend (it runs "
            "command jobs; a ray job needs a cluster whose backend is ray, a container job "
            "one whose backend is kubernetes)"
        )
    return payload


def check_same_job(existing: DispatchResult, request: DispatchRequest) -> None:
    """A repeated dispatch must be the same run; a reused id for other work is a bug."""
    if (existing.job, existing.cluster, existing.placements) != (
        request.job,
        request.cluster,
        request.placements,
    ):
        raise DispatchRejected(
            f"run_id: {request.run_id!r} was already dispatched for job {existing.job!r} "
            "with other placements; a run id names one attempt"
        )


RENDEZVOUS_PORTS = range(20000, 32000)
"""Where ``MASTER_PORT`` is chosen: below Linux's ephemeral range (32768-60999), so a port
the kernel handed to some client is never the one a run's rank 0 must listen on."""


def rendezvous_port(run_id: str) -> int:
    """The run's ``MASTER_PORT``: a deterministic function of the run id (a dispatch repeated
    after a crash gives every replica the same port; another run most likely another)."""
    return RENDEZVOUS_PORTS[zlib.crc32(run_id.encode()) % len(RENDEZVOUS_PORTS)]


def rendezvous_env(
    request: DispatchRequest, placement: ReplicaPlacement, master_addr: str
) -> dict[str, str]:
    """What a replica needs to join its run's process group (PyTorch's ``env://``).

    ``WORLD_SIZE``: the run's replicas over all tasks; ``RANK``: this replica's position in the
    request's placements (task by task, replica by replica: replica 0 of the first task is
    rank 0); ``LOCAL_RANK``/``LOCAL_WORLD_SIZE``: the same among the replicas on its node;
    ``MASTER_ADDR``: how the other replicas reach rank 0's node (the backend says:
    ``master_addr``); ``MASTER_PORT``: ``rendezvous_port(run_id)``. Every backend sets them
    below the job's own env, so a job that sets ``MASTER_PORT`` itself keeps its value.
    """
    placements = request.placements
    rank = placements.index(placement)
    on_node = [index for index, other in enumerate(placements) if other.node == placement.node]
    return {
        "WORLD_SIZE": str(len(placements)),
        "RANK": str(rank),
        "LOCAL_RANK": str(on_node.index(rank)),
        "LOCAL_WORLD_SIZE": str(len(on_node)),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(rendezvous_port(request.run_id)),
    }


def rendezvous_envs(
    request: DispatchRequest, master_addr: str
) -> dict[ReplicaPlacement, dict[str, str]]:
    """``rendezvous_env`` of every placement of ``request``, in one pass over them (one call
    per placement looks each up in all of them: 10,000 replicas took seconds)."""
    placements = request.placements
    per_node: dict[str, int] = {}
    for placement in placements:
        per_node[placement.node] = per_node.get(placement.node, 0) + 1
    seen: dict[str, int] = {}
    port = str(rendezvous_port(request.run_id))
    envs: dict[ReplicaPlacement, dict[str, str]] = {}
    for rank, placement in enumerate(placements):
        local = seen.get(placement.node, 0)
        seen[placement.node] = local + 1
        envs.setdefault(
            placement,
            {
                "WORLD_SIZE": str(len(placements)),
                "RANK": str(rank),
                "LOCAL_RANK": str(local),
                "LOCAL_WORLD_SIZE": str(per_node[placement.node]),
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": port,
            },
        )
    return envs


def write_json_atomic(path: Path, data: Mapping[str, Any], *, durable: bool = True) -> None:
    """Write-then-rename (``flotilla.files``): a reader (or a restart after kill -9) sees old or
    new, and a device or FIFO at ``path`` is written, never replaced. ``durable`` fsyncs
    before the rename; without it the caller must ``sync_file`` later (a kill -9 of this
    process keeps the page cache, only a power loss needs the fsync)."""
    # No indent: the C encoder (a record of 10,000 replicas in milliseconds, not a second).
    write_text_safely(path, json.dumps(data, sort_keys=True), durable=durable)


def sync_file(path: Path) -> None:
    """fsync ``path`` (a file written with ``durable=False``); gone already is fine."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def read_json(path: Path) -> dict[str, Any] | None:
    """The object in ``path``, or ``None`` when missing or unreadable (a torn write)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def placements_to_json(placements: Sequence[ReplicaPlacement]) -> list[dict[str, Any]]:
    return [
        {"task": p.task, "replica": p.replica, "node": p.node, "gpu_ids": list(p.gpu_ids)}
        for p in placements
    ]


def placements_from_json(data: Sequence[Mapping[str, Any]]) -> tuple[ReplicaPlacement, ...]:
    return tuple(
        ReplicaPlacement(
            task=str(item["task"]),
            replica=int(item["replica"]),
            node=str(item["node"]),
            gpu_ids=tuple(int(device) for device in item["gpu_ids"]),
        )
        for item in data
    )


def pick_replica(
    placements: Sequence[ReplicaPlacement], task: str | None, replica: int | None
) -> int:
    """Index of the replica a logs request names (the first one when it names none)."""
    for index, placement in enumerate(placements):
        if (task is None or placement.task == task) and (
            replica is None or placement.replica == replica
        ):
            return index
    raise UnknownReplica(
        f"the run has no replica {task or '*'}/{'*' if replica is None else replica}"
    )


class ChangeLog:
    """Remembers which runs changed state since the last ``poll`` (each run once, in order)."""

    def __init__(self) -> None:
        self._last: dict[str, BackendRunState] = {}
        self._changed: dict[str, None] = {}

    def observe(self, run_id: str, state: BackendRunState) -> None:
        if self._last.get(run_id) is not state:
            self._last[run_id] = state
            self._changed[run_id] = None

    def remember(self, run_id: str, state: BackendRunState) -> None:
        """Take ``state`` as already reported (a run loaded at start that is not news)."""
        self._last[run_id] = state

    def knows(self, run_id: str) -> bool:
        """Whether a state of ``run_id`` was observed or remembered before."""
        return run_id in self._last

    def mark(self, run_id: str) -> None:
        """Report ``run_id`` at the next poll even if its state did not change."""
        self._changed[run_id] = None

    def forget(self, run_id: str) -> None:
        """Stop tracking ``run_id`` (a finished run reported and dropped from memory)."""
        self._last.pop(run_id, None)
        self._changed.pop(run_id, None)

    def drain(self) -> Iterator[str]:
        changed, self._changed = list(self._changed), {}
        yield from changed


CHECKPOINT_FILE_VARIABLE = "FLOTILLA_CHECKPOINT_FILE"
"""The variable that names a job's checkpoint file (``flotilla.checkpoint()`` touches it)."""


def checkpoint_env(path: Path | None) -> dict[str, str]:
    """The job's ``FLOTILLA_CHECKPOINT_FILE`` when its backend gives it one (none: empty)."""
    return {} if path is None else {CHECKPOINT_FILE_VARIABLE: str(path)}


def reported_checkpoint(path: Path | None, started_at: float | None, now: float) -> float | None:
    """When a job last reported a checkpoint: the time of its checkpoint file, which
    ``flotilla.checkpoint()`` touches; ``None`` while there is no file (or no start). Every
    backend that gives a job a file it can read back reports it this way (issue 28). The job
    owns the file, so the link itself is read (never followed) and the time held within the
    run's start and ``now`` (a clock skewed on the job's node, or a forged time, cannot put it
    outside the run)."""
    if path is None or started_at is None:
        return None
    try:
        touched = os.lstat(path).st_mtime
    except OSError:
        return None
    return min(max(touched, started_at), now)


def read_log_slice(path: Path, offset: int, limit: int) -> tuple[bytes, int]:
    """Up to ``limit`` bytes of the log at ``path`` from ``offset``, and the log's size (a
    missing log is empty). An offset past the end reads nothing: seeking there is refused by
    the file system beyond its largest file size (``EINVAL``; an offset of 2^62, within the
    API's limit, was a 500)."""
    try:
        with path.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            if offset >= size:
                return b"", size
            file.seek(offset)
            return file.read(max(0, limit)), size
    except FileNotFoundError:
        return b"", 0


def run_directory(state_dir: Path, run_id: str) -> Path:
    return state_dir / "runs" / run_id


def saved_run_ids(state_dir: Path) -> list[str]:
    runs = state_dir / "runs"
    if not runs.is_dir():
        return []
    return sorted(entry.name for entry in runs.iterdir() if (entry / "run.json").is_file())
