"""What a run is, read back: its files in ``output_dir`` and its status from a Slurm job.

``output_dir/RUN_ID/`` holds ``run.json`` (written before ``sbatch`` and again with the job id
after it, so a run Slurm has forgotten after ``MinJobAge`` is still known), each replica's
``TASK-REPLICA.stdout|stderr|exit``, the batch script's own ``batch.stdout|stderr`` and
``checkpoint``, the job's ``FLOTILLA_CHECKPOINT_FILE`` (``flotilla.checkpoint()`` touches it;
its time is the run's ``last_checkpoint_at``, issue 28).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from flotilla.backends.common import (
    placements_from_json,
    placements_to_json,
    read_json,
    reported_checkpoint,
    write_json_atomic,
)
from flotilla.backends.interface import BackendRunState, ReplicaStatus, RunStatus
from flotilla.backends.slurm.commands import SlurmJob
from flotilla.backends.slurm.marker import (
    ACTIVE_STATES,
    ENDED_STATES,
    STOP_MAX_RUNTIME,
    Marker,
    exit_code_of,
)


class RunFiles:
    """The files of this cluster's runs under ``output_dir``."""

    def __init__(self, output_dir: Path, cluster: str) -> None:
        self.output_dir = output_dir
        self.cluster = cluster

    def directory(self, run_id: str) -> Path:
        return self.output_dir / run_id

    def write_record(self, marker: Marker, job_id: int | None) -> None:
        write_json_atomic(
            self.directory(marker.run_id) / "run.json",
            {
                "run_id": marker.run_id,
                "job": marker.job,
                "cluster": marker.cluster,
                "dispatched_at": marker.dispatched_at,
                "placements": placements_to_json(marker.placements),
                "max_runtime": marker.max_runtime,
                "slurm_job_id": job_id,
                "stop": marker.stop,
            },
        )

    def forget(self, run_id: str) -> None:
        """Slurm refused the run: leave no record of it."""
        (self.directory(run_id) / "run.json").unlink(missing_ok=True)

    def record_stop(self, marker: Marker) -> None:
        record = self.read_record(marker.run_id)
        if record is not None:
            self.write_record(marker, record[1])

    def read_record(self, run_id: str) -> tuple[Marker, int | None] | None:
        """The run's marker and Slurm job id (``None`` until sbatch answered)."""
        data = read_json(self.directory(run_id) / "run.json")
        if data is None or data.get("cluster") != self.cluster:
            return None
        try:
            marker = Marker(
                cluster=str(data["cluster"]),
                run_id=str(data["run_id"]),
                job=str(data["job"]),
                dispatched_at=float(data["dispatched_at"]),
                placements=placements_from_json(data["placements"]),
                max_runtime=data.get("max_runtime"),
                stop=data.get("stop"),
            )
        except (KeyError, TypeError, ValueError):
            return None
        job_id = data.get("slurm_job_id")
        return marker, int(job_id) if job_id is not None else None

    def checkpoint_file(self, run_id: str) -> Path:
        """The run's ``FLOTILLA_CHECKPOINT_FILE``: beside its output, which the nodes write and
        Flotilla reads, so the backend reads its time back as it reads the logs."""
        return self.directory(run_id) / "checkpoint"

    def replica_exit(self, run_id: str, task: str, replica: int) -> int | None:
        try:
            return int((self.directory(run_id) / f"{task}-{replica}.exit").read_text().strip())
        except (OSError, ValueError):
            return None

    def failure_line(self, run_id: str) -> str:
        """The batch script's "replica worker/1 exited with code 3", if it said so."""
        try:
            text = (self.directory(run_id) / "batch.stderr").read_text(errors="replace")
        except OSError:
            return ""
        for line in text.splitlines():
            if line.startswith("flotilla: replica "):
                return line.removeprefix("flotilla: ")
        return ""


def status_of(marker: Marker, job: SlurmJob, files: RunFiles, now: float) -> RunStatus:
    """The run's status from its Slurm job (and the stop Flotilla asked for, in the marker),
    with the checkpoint its job last reported."""
    status = _status_of(marker, job, files, now)
    checkpoint = files.checkpoint_file(marker.run_id)
    return replace(
        status, last_checkpoint_at=reported_checkpoint(checkpoint, status.started_at, now)
    )


def _status_of(marker: Marker, job: SlurmJob, files: RunFiles, now: float) -> RunStatus:
    if job.state in ACTIVE_STATES:
        state = ACTIVE_STATES[job.state]
        started = job.start_time if state is BackendRunState.RUNNING else None
        message = job.reason if state is BackendRunState.PENDING and job.reason != "None" else ""
        return build_status(
            marker, state, files, started_at=started, message=message, slurm_job=job.job_id
        )
    state, message = ENDED_STATES.get(job.state, (BackendRunState.LOST, f"Slurm state {job.state}"))
    exit_code = exit_code_of(job.exit_code)
    if marker.stop == STOP_MAX_RUNTIME or (job.state == "TIMEOUT" and marker.max_runtime):
        state, exit_code = BackendRunState.FAILED, None
        message = f"exceeded max_runtime of {marker.max_runtime:g}s"
    elif marker.stop is not None:
        state, exit_code, message = BackendRunState.CANCELLED, None, marker.stop
    elif state is BackendRunState.SUCCEEDED:
        exit_code = 0
    elif job.state == "FAILED":
        message = files.failure_line(marker.run_id) or f"exited with code {exit_code}"
    elif state is not BackendRunState.FAILED or not exit_code:
        exit_code = None  # TIMEOUT, OUT_OF_MEMORY…: Slurm's code says nothing more
    ran = job.nodes and job.start_time and job.start_time <= (job.end_time or now)
    return build_status(
        marker,
        state,
        files,
        started_at=job.start_time if ran else None,
        finished_at=job.end_time or now,
        exit_code=exit_code,
        message=message,
        slurm_job=job.job_id,
    )


def build_status(
    marker: Marker,
    state: BackendRunState,
    files: RunFiles,
    *,
    started_at: float | None = None,
    finished_at: float | None = None,
    exit_code: int | None = None,
    message: str = "",
    slurm_job: int | None = None,
) -> RunStatus:
    """``slurm_job``: the Slurm job id of the run's batch job (every replica's engine id)."""
    engine_id = None if slurm_job is None else str(slurm_job)
    replicas = []
    for placement in marker.placements:
        code = files.replica_exit(marker.run_id, placement.task, placement.replica)
        if state.terminal and code is not None and state is not BackendRunState.CANCELLED:
            replica_state = BackendRunState.SUCCEEDED if code == 0 else BackendRunState.FAILED
        else:
            replica_state = state
        replicas.append(
            ReplicaStatus(
                placement.task,
                placement.replica,
                placement.node,
                replica_state,
                code,
                engine_id=engine_id,
            )
        )
    return RunStatus(
        run_id=marker.run_id,
        job=marker.job,
        cluster=files.cluster,
        state=state,
        dispatched_at=marker.dispatched_at,
        started_at=started_at,
        finished_at=finished_at if state.terminal else None,
        exit_code=exit_code,
        message=message,
        replicas=tuple(replicas),
    )
