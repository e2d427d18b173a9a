"""How a Flotilla run becomes Ray jobs, and how Ray's jobs are read back as a run.

A run is one Ray job per replica. Each Ray job's ``submission_id`` is derived from the run id
(``<cluster>--<run id>--<task>--<replica>``: the cluster part keeps two Flotilla clusters
sharing one Ray cluster apart), and its ``metadata`` is the marker that names the Flotilla
cluster, run, job and replica. Ray keeps both for as long as it keeps the job, so a fresh
backend object — after a restart or a leader failover — finds every run of its cluster from
Ray alone: nothing is stored on the scheduler's disk.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flotilla.backends.common import checkpoint_env, rendezvous_env
from flotilla.backends.interface import (
    BackendRunState,
    DispatchRequest,
    ReplicaPlacement,
)
from flotilla.backends.ray.relay import RAY_STOP_SIGNALS, relay_command
from flotilla.model.payload import CommandPayload, Payload, RayPayload

MARKER = "flotilla_cluster"
"""The metadata key whose presence makes a Ray job Flotilla's."""

TIMEOUT_EXIT_CODES = (124, 137)
"""``timeout`` exits 124 when it stopped the command, 137 when it had to SIGKILL it."""

STATE_OF_RAY = {
    "PENDING": BackendRunState.PENDING,
    "RUNNING": BackendRunState.RUNNING,
    "SUCCEEDED": BackendRunState.SUCCEEDED,
    "FAILED": BackendRunState.FAILED,
    "STOPPED": BackendRunState.CANCELLED,
}


def submission_id(cluster: str, run_id: str, task: str, replica: int) -> str:
    return f"{cluster}--{run_id}--{task}--{replica}"


@dataclass(frozen=True)
class Marker:
    """What Flotilla wrote in a Ray job's metadata (all values are strings in Ray)."""

    cluster: str
    run_id: str
    job: str
    task: str
    replica: int
    node: str
    gpu_ids: tuple[int, ...]
    dispatched_at: float
    max_runtime: float | None
    replicas: int
    """How many replicas (Ray jobs) the run has, so a half-dispatched run is recognisable."""
    index: int
    """This replica's position in the run's placements (their order is part of the run)."""

    @property
    def placement(self) -> ReplicaPlacement:
        return ReplicaPlacement(self.task, self.replica, self.node, self.gpu_ids)

    def to_metadata(self) -> dict[str, str]:
        return {
            MARKER: self.cluster,
            "flotilla_run": self.run_id,
            "flotilla_job": self.job,
            "flotilla_task": self.task,
            "flotilla_replica": str(self.replica),
            "flotilla_node": self.node,
            "flotilla_gpu_ids": ",".join(str(device) for device in self.gpu_ids),
            "flotilla_dispatched_at": repr(self.dispatched_at),
            "flotilla_max_runtime": "" if self.max_runtime is None else repr(self.max_runtime),
            "flotilla_replicas": str(self.replicas),
            "flotilla_index": str(self.index),
        }

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, str] | None) -> Marker | None:
        """The marker of a Ray job, or ``None`` for a job that is not Flotilla's (or is
        damaged: such a job is left alone, never guessed at)."""
        if not metadata or MARKER not in metadata:
            return None
        try:
            devices = metadata.get("flotilla_gpu_ids", "")
            runtime = metadata.get("flotilla_max_runtime", "")
            return cls(
                cluster=metadata[MARKER],
                run_id=metadata["flotilla_run"],
                job=metadata["flotilla_job"],
                task=metadata["flotilla_task"],
                replica=int(metadata["flotilla_replica"]),
                node=metadata["flotilla_node"],
                gpu_ids=tuple(int(device) for device in devices.split(",") if device),
                dispatched_at=float(metadata["flotilla_dispatched_at"]),
                max_runtime=float(runtime) if runtime else None,
                replicas=int(metadata["flotilla_replicas"]),
                index=int(metadata["flotilla_index"]),
            )
        except (KeyError, ValueError):
            return None


@dataclass(frozen=True)
class Submission:
    """The keyword arguments of one ``JobSubmissionClient.submit_job`` call."""

    fields: Mapping[str, Any]


def build_submission(
    request: DispatchRequest,
    payload: Payload,
    placement: ReplicaPlacement,
    marker: Marker,
    node_id: str,
    *,
    grace_period: float,
    master_addr: str,
    checkpoint_file: Path | None = None,
) -> Submission:
    """The Ray job for one replica: entrypoint, runtime_env, resources, node, marker.
    ``master_addr``: the IP of the node of the run's first replica (``MASTER_ADDR``);
    ``checkpoint_file``: the run's ``FLOTILLA_CHECKPOINT_FILE`` (the backend's
    ``checkpoint_dir``), if it gives one."""
    env: dict[str, str] = {**request.env, **rendezvous_env(request, placement, master_addr)}
    runtime_env: dict[str, Any] = {}
    if isinstance(payload, CommandPayload):
        env.update(payload.env)
        # Ray runs the entrypoint with a shell: a list command is quoted, a string one is
        # already shell code.
        command = (
            payload.command if isinstance(payload.command, str) else shlex.join(payload.command)
        )
        if payload.working_dir is not None:
            command = f"cd {shlex.quote(payload.working_dir)} && {command}"
    else:
        assert isinstance(payload, RayPayload)
        env.update(payload.runtime_env.env_vars)
        if payload.runtime_env.working_dir is not None:
            runtime_env["working_dir"] = payload.runtime_env.working_dir
        if payload.runtime_env.pip is not None:
            runtime_env["pip"] = list(payload.runtime_env.pip)
        command = payload.entrypoint
    env.update(backend_env(request, placement))
    env.update(checkpoint_env(checkpoint_file))
    # Ray's job supervisor reads how to stop the job from the job's environment: the signal
    # (SIGTERM or SIGINT) and the wait before its SIGKILL (whole seconds, at least one). A
    # job's own preemption grace and signal win over the backend's (relay.py).
    signal = request.preemption_signal or "SIGTERM"
    stop_grace = grace_period if request.preemption_grace is None else request.preemption_grace
    env["RAY_JOB_STOP_WAIT_TIME_S"] = str(max(1, math.ceil(stop_grace)))
    if signal == "SIGINT":
        env["RAY_JOB_STOP_SIGNAL"] = "SIGINT"
    runtime_env["env_vars"] = env
    if signal not in RAY_STOP_SIGNALS:
        command = relay_command(
            command, signal, stop_grace, request.max_runtime, deadline_grace=grace_period
        )
    elif request.max_runtime is not None:
        # Enforced on the node itself, so it holds while no scheduler watches.
        command = shlex.join(
            [
                "timeout",
                "--kill-after",
                f"{max(1, math.ceil(grace_period))}s",
                f"{request.max_runtime:g}s",
                "/bin/sh",
                "-c",
                command,
            ]
        )
    fields: dict[str, Any] = {
        "entrypoint": command,
        "submission_id": submission_id(
            request.cluster, request.run_id, placement.task, placement.replica
        ),
        "metadata": marker.to_metadata(),
        "runtime_env": runtime_env,
        "entrypoint_label_selector": {"ray.io/node-id": node_id},
    }
    fields.update(resource_fields(request.resources.get(placement.task, {})))
    return Submission(fields)


def resource_fields(asks: Mapping[str, float]) -> dict[str, Any]:
    """Flotilla's per-replica resources as the entrypoint's Ray resources.

    ``cpu``/``gpu`` are Ray's ``CPU``/``GPU`` (fractions allowed), ``memory`` (bytes) Ray's
    logical ``memory``; ``gpu_memory`` has no Ray counterpart and is not passed on; any other
    name is a custom Ray resource of that name.
    """
    fields: dict[str, Any] = {}
    custom: dict[str, float] = {}
    for name, amount in asks.items():
        if amount <= 0:
            continue
        if name == "cpu":
            fields["entrypoint_num_cpus"] = float(amount)
        elif name == "gpu":
            fields["entrypoint_num_gpus"] = float(amount)
        elif name == "memory":
            fields["entrypoint_memory"] = int(amount)
        elif name == "gpu_memory":
            continue
        else:
            custom[name] = float(amount)
    if custom:
        fields["entrypoint_resources"] = custom
    return fields


def backend_env(request: DispatchRequest, placement: ReplicaPlacement) -> dict[str, str]:
    """Variables Flotilla sets for every replica (they win over the user's). GPUs are Ray's to
    choose: it sets ``CUDA_VISIBLE_DEVICES`` for the entrypoint itself."""
    return {
        "FLOTILLA_JOB": request.job,
        "FLOTILLA_RUN": request.run_id,
        "FLOTILLA_CLUSTER": request.cluster,
        "FLOTILLA_TASK": placement.task,
        "FLOTILLA_REPLICA": str(placement.replica),
        "FLOTILLA_NODE": placement.node,
    }


@dataclass(frozen=True)
class RayReplica:
    """One replica's Ray job as last read from Ray."""

    marker: Marker
    ray_status: str
    start_time: float | None
    end_time: float | None
    exit_code: int | None
    message: str
    entrypoint: str = ""
    driver_started: bool = False
    """Ray ran the entrypoint's driver (its node is known). Ray's ``start_time`` is the
    submission's, set even for a job stopped while it waited for resources: only a started
    driver makes it a start."""

    @property
    def state(self) -> BackendRunState:
        """Ray's status as a Flotilla state (a status this version does not know: lost)."""
        return STATE_OF_RAY.get(self.ray_status, BackendRunState.LOST)

    @property
    def timed_out(self) -> bool:
        return (
            self.marker.max_runtime is not None
            and self.ray_status == "FAILED"
            and self.exit_code in TIMEOUT_EXIT_CODES
        )


def read_replica(details: Any) -> RayReplica | None:
    """A Ray ``JobDetails`` as a replica, or ``None`` when it carries no Flotilla marker."""
    marker = Marker.from_metadata(getattr(details, "metadata", None))
    if marker is None:
        return None
    status = getattr(details, "status", "")
    status_name = str(getattr(status, "value", status))
    start, end = getattr(details, "start_time", None), getattr(details, "end_time", None)
    exit_code = getattr(details, "driver_exit_code", None)
    return RayReplica(
        marker=marker,
        ray_status=status_name,
        start_time=start / 1000.0 if start else None,
        end_time=end / 1000.0 if end else None,
        exit_code=int(exit_code) if exit_code is not None else None,
        message=str(getattr(details, "message", "") or ""),
        entrypoint=str(getattr(details, "entrypoint", "") or ""),
        driver_started=bool(getattr(details, "driver_node_id", None)) or exit_code is not None,
    )


def describe_failure(replica: RayReplica) -> str:
    """One line for a failed replica: Ray's message without the log tail it appends."""
    if replica.timed_out:
        assert replica.marker.max_runtime is not None
        return f"exceeded max_runtime of {replica.marker.max_runtime:g}s"
    message = replica.message.split(", last available logs", 1)[0].strip()
    if not message:
        message = f"exited with code {replica.exit_code}"
    return f"replica {replica.marker.placement.label} failed on Ray: {message}"


RAY_LOG_LINE = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\tINFO job_manager\.py:\d+ -- [^\n]*\n"
)
RAY_LOG_START = "0000-00-00 00:00:00,000\tINFO job_manager.py:"
"""The start of a Ray line (digits as 0), to know a Ray line still being written."""


def user_output(log: str, submission: str, entrypoint: str) -> str:
    """The job's own output: Ray's log of a job also holds lines of its own (runtime env set
    up, "Running entrypoint for job …: <the whole wrapped entrypoint>"), which are not the
    user's and would change with Flotilla's wrapping; they are cut out. Ray writes its
    announcement through a buffered logger, so it may come after the job's first output.

    A Ray line caught half-written (no newline yet) is held back too: were its start served
    as output and cut on the next read, the output would shrink under a reader's offset, and
    a follower would skip as many bytes of the job's own."""
    position = 0
    while match := RAY_LOG_LINE.match(log, position):
        position = match.end()
    log = log[position:]
    if "\n" not in log and _may_become(log, RAY_LOG_START, digits=True):
        return ""
    announcement = f"Running entrypoint for job {submission}: {entrypoint}\n"
    if announcement in log:
        return log.replace(announcement, "", 1)
    last = log[log.rfind("\n") + 1 :]
    if last and _may_become(last, announcement):
        return log[: -len(last)]
    return log


def _may_become(text: str, line: str, digits: bool = False) -> bool:
    """Whether ``text`` is the start of ``line`` (``digits``: any digit matches a 0)."""
    head = text[: len(line)]
    if digits:
        head = re.sub(r"\d", "0", head)
    return line.startswith(head)
