"""A Slurm run's stop: SIGTERM now, SIGKILL once the grace has passed — from this backend, not
Slurm's KillWait. Runs without Slurm: the clients are a recording fake, so the signals the
backend asks for are checked exactly (the real-Slurm test of ``test_slurm.py`` skips where no
Slurm is installed, and a mutant that sent TERM again past the grace survived there)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from flotilla.backends.interface import CancelRequest, ReplicaPlacement
from flotilla.backends.slurm.backend import REFRESH_AGE, SlurmBackend
from flotilla.backends.slurm.commands import SlurmJob, SlurmNode
from flotilla.backends.slurm.marker import Marker

START = 1_800_000_000.0
JOB_ID = 41


class RecordingClients:
    """What ``SlurmBackend`` asks of ``squeue``/``scontrol``/``scancel``, with one job."""

    where = "a recording fake"

    def __init__(self, job: SlurmJob) -> None:
        self.job = job
        self.signals: list[tuple[int, str | None]] = []

    def jobs(self) -> list[SlurmJob]:
        return [self.job]

    def nodes(self) -> list[SlurmNode]:
        return []

    def set_comment(self, job_id: int, comment: str) -> None:
        assert job_id == self.job.job_id
        self.job = replace(self.job, comment=comment)

    def cancel(self, job_id: int, signal: str | None = None) -> None:
        self.signals.append((job_id, signal))

    def completed(self, names: set[str]) -> Sequence[SlurmJob]:
        return []


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[SlurmBackend, RecordingClients, Clock]]:
    """A backend that finds one running Flotilla job in squeue (as after a restart)."""
    marker = Marker(
        cluster="hpc",
        run_id="run-1",
        job="job-1",
        dispatched_at=START,
        placements=(ReplicaPlacement("main", 0, "node-1"),),
    )
    job = SlurmJob(
        job_id=JOB_ID,
        name="run-1",
        comment=marker.encode(),
        state="RUNNING",
        exit_code=None,
        submit_time=START,
        start_time=START,
        end_time=None,
        nodes="node-1",
        reason="None",
    )
    clock = Clock()
    backend = SlurmBackend(
        cluster="hpc", output_dir=tmp_path / "out", monitor_interval=3600.0, clock=clock
    )
    clients = RecordingClients(job)
    backend.clients = clients  # type: ignore[assignment]
    try:
        yield backend, clients, clock
    finally:
        backend.close()


def enforce(backend: SlurmBackend) -> None:
    """Let the backend read squeue afresh (a read is reused for ``REFRESH_AGE``) and act."""
    time.sleep(REFRESH_AGE * 1.5)
    backend.inventory()


def test_a_stop_sends_term_then_kill_once_its_grace_has_passed(
    running: tuple[SlurmBackend, RecordingClients, Clock],
) -> None:
    backend, clients, clock = running
    result = backend.cancel(CancelRequest("run-1", reason="cancelled by request", grace_period=5))
    assert result.outcome.value == "stopping"
    assert clients.signals == [(JOB_ID, "TERM")]
    assert "kill=" in clients.job.comment  # the deadline is in Slurm, for any backend object

    clock.now = START + 4  # within the grace: nothing more
    enforce(backend)
    assert clients.signals == [(JOB_ID, "TERM")]

    clock.now = START + 6  # past it: the hard kill, not another TERM a trap can ignore
    enforce(backend)
    assert clients.signals[1:] == [(JOB_ID, "KILL")]


def test_a_preempted_job_gets_its_own_signal_first_then_the_kill_after_its_grace(
    running: tuple[SlurmBackend, RecordingClients, Clock],
) -> None:
    """``preemption: {signal: SIGUSR1, grace: 30}``: ``scancel --signal=USR1`` (Slurm's
    ``--signal`` for a checkpoint), the kill only after the job's 30 s."""
    backend, clients, clock = running
    backend.cancel(CancelRequest("run-1", reason="preempted", grace_period=30, signal="SIGUSR1"))
    assert clients.signals == [(JOB_ID, "USR1")]
    clock.now = START + 29
    enforce(backend)
    assert clients.signals == [(JOB_ID, "USR1")]
    clock.now = START + 31
    enforce(backend)
    assert clients.signals[1:] == [(JOB_ID, "KILL")]
