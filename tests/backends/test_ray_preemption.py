"""Preemption that saves work on the ray backend (issue 28): a job's ``preemption.signal`` and
grace reach its Ray driver, and ``flotilla.checkpoint()`` shows on its run. The mapping tests
need no engine; one test runs on the session's real Ray head (``ray_head``)."""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from flotilla.backends import (
    BackendRunState,
    CancelRequest,
    DispatchRequest,
    ReplicaPlacement,
    RunStatus,
)
from tests.timing import deadline, wait_until

from .engines.ray_head import RayHead
from .ray_support import RAY_WAIT_LIMIT
from .test_ray import make, marker, submission, wait_terminal

pytestmark = pytest.mark.xdist_group("ray")
"""One worker runs every test on the Ray head, so a session starts one head."""


# --- Flotilla fields → Ray fields (no engine) ---


def test_a_jobs_sigterm_or_sigint_and_grace_are_rays_own_stop() -> None:
    """Ray's ``stop_job`` sends SIGTERM or SIGINT itself and waits ``RAY_JOB_STOP_WAIT_TIME_S``
    (read from the job's environment): the job's grace wins over the backend's (2.5 s)."""
    fields = submission({"command": "python train.py"}, preemption_grace=120.0)
    env = fields["runtime_env"]["env_vars"]
    assert env["RAY_JOB_STOP_WAIT_TIME_S"] == "120"
    assert "RAY_JOB_STOP_SIGNAL" not in env  # SIGTERM, Ray's default
    assert fields["entrypoint"] == "python train.py"
    interrupt = submission(
        {"command": "python train.py"}, preemption_signal="SIGINT", preemption_grace=0.5
    )
    env = interrupt["runtime_env"]["env_vars"]
    assert (env["RAY_JOB_STOP_SIGNAL"], env["RAY_JOB_STOP_WAIT_TIME_S"]) == ("SIGINT", "1")
    assert interrupt["entrypoint"] == "python train.py"


def test_a_signal_ray_cannot_send_is_relayed_by_the_driver() -> None:
    fields = submission(
        {"command": "python train.py"},
        preemption_signal="SIGUSR1",
        preemption_grace=60.0,
        max_runtime=90.0,
    )
    argv = shlex.split(fields["entrypoint"])
    assert argv[0] == "python3" and argv[1] == "-c"
    # The signal, the stop's grace, max_runtime (the relay's, not timeout's), its grace.
    assert argv[3:] == ["SIGUSR1", "60", "90", "2.5", "python train.py"]
    assert fields["runtime_env"]["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"] == "60"


def test_the_checkpoint_file_is_given_only_with_a_checkpoint_dir(tmp_path: Path) -> None:
    from flotilla.backends.ray import RayBackend

    assert (
        "FLOTILLA_CHECKPOINT_FILE" not in submission({"command": "true"})["runtime_env"]["env_vars"]
    )
    with pytest.raises(ValueError, match="checkpoint_dir"):
        RayBackend(cluster="c", address="http://127.0.0.1:8265", checkpoint_dir="")


class ListedJobs:
    """What the backend asks of Ray's Jobs API, answered from a list of ``JobDetails``."""

    def __init__(self) -> None:
        self.listed: list[SimpleNamespace] = []

    def jobs(self) -> list[SimpleNamespace]:
        return list(self.listed)

    def info(self, submission: str) -> SimpleNamespace | None:
        return next((job for job in self.listed if job.submission_id == submission), None)


def ray_job(cluster: str, status: str, started: float) -> SimpleNamespace:
    """One replica's Ray job of run ``run-1``, as ``list_jobs`` returns it."""
    return SimpleNamespace(
        submission_id=f"{cluster}--run-1--main--0",
        metadata=marker(cluster=cluster).to_metadata(),
        status=status,
        start_time=started * 1000,
        end_time=None if status == "RUNNING" else (started + 60) * 1000,
        driver_exit_code=None if status == "RUNNING" else 0,
        message="",
        entrypoint="python train.py",
    )


def test_a_touched_checkpoint_file_is_news_for_the_next_poll_only(tmp_path: Path) -> None:
    """The Ray backend's poll reports a run whose checkpoint file changed, though its state
    did not; a finished run's file goes once its end was reported, and a finished run's
    leftover file is not news to a fresh backend (it is removed)."""
    from flotilla.backends.ray import RayBackend

    started = time.time() - 100
    listed = ListedJobs()
    listed.listed = [ray_job("c", "RUNNING", started)]

    def backend() -> RayBackend:
        made = RayBackend(cluster="c", address="http://127.0.0.1:1", checkpoint_dir=tmp_path)
        made._client = listed  # type: ignore[assignment]
        return made

    ray = backend()
    assert [status.last_checkpoint_at for status in ray.poll()] == [None]  # adopted: running
    checkpoint = tmp_path / "c--run-1.checkpoint"
    checkpoint.touch()
    [status] = ray.poll()
    assert status.state is BackendRunState.RUNNING
    assert status.last_checkpoint_at == checkpoint.lstat().st_mtime
    assert ray.poll() == []  # the same time again: not news
    listed.listed = [ray_job("c", "SUCCEEDED", started)]
    [ended] = ray.poll()
    assert ended.state is BackendRunState.SUCCEEDED
    assert ended.last_checkpoint_at == status.last_checkpoint_at
    assert not checkpoint.exists()

    checkpoint.touch()  # left by a run that ended while no backend watched
    assert backend().poll() == []
    assert not checkpoint.exists()


# --- on a real Ray head ---

VICTIM = """
import os, signal, time
from pathlib import Path
import flotilla

def save(*_):
    Path(os.environ["MARKER"]).write_text(str(os.getpid()))  # and go on: killed after the grace

signal.signal(signal.SIGUSR1, save)
assert flotilla.checkpoint()
print("ready", flush=True)
while True:
    time.sleep(0.1)
"""


def polled_until_checkpoint(backend: object, run_id: str) -> RunStatus:
    due = deadline(RAY_WAIT_LIMIT)
    while True:
        for status in backend.poll():  # type: ignore[attr-defined]
            if status.run_id == run_id and status.last_checkpoint_at is not None:
                return status
        assert not due.expired(), f"run {run_id} never reported a checkpoint"
        time.sleep(0.2)


def await_marker(path: Path) -> int:
    wait_until(lambda: path.exists() and bool(path.read_text()), "the job's signal", RAY_WAIT_LIMIT)
    return int(path.read_text())


def process_gone(pid: int) -> bool:
    """Whether ``pid`` ended (a zombie not yet reaped runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_a_preempted_ray_job_checkpoints_gets_its_signal_and_is_killed_after_its_grace(
    ray_head: RayHead, tmp_path: Path
) -> None:
    """``preemption: {signal: SIGUSR1, grace: 3}`` and ``flotilla.checkpoint()`` on Ray: the
    checkpoint shows on the run while it runs; stopped, the job outlives Ray's SIGTERM, gets
    SIGUSR1 (it writes a marker) and, ignoring it, is gone once the grace is over."""
    backend = make(ray_head, checkpoint_dir=tmp_path / "checkpoints")
    node = backend.inventory().nodes[0].name
    marker = tmp_path / "saved"
    backend.dispatch(
        DispatchRequest(
            run_id="victim",
            job="job-a",
            cluster=backend.cluster,
            placements=(ReplicaPlacement("main", 0, node),),
            payload={
                "command": f"{shlex.quote(sys.executable)} -c {shlex.quote(VICTIM)}",
                "env": {"MARKER": str(marker)},
            },
            preemption_signal="SIGUSR1",
            preemption_grace=3.0,
        )
    )
    running = polled_until_checkpoint(backend, "victim")
    assert running.state is BackendRunState.RUNNING
    assert running.started_at is not None and running.last_checkpoint_at is not None
    assert running.started_at <= running.last_checkpoint_at <= time.time()

    backend.cancel(CancelRequest("victim", reason="preempted", grace_period=3, signal="SIGUSR1"))
    job = await_marker(marker)
    status = wait_terminal(backend, "victim")
    assert (status.state, status.message) == (BackendRunState.CANCELLED, "preempted")
    wait_until(lambda: process_gone(job), f"the job's process {job} to end after its grace", 10.0)
    backend.poll()  # reports the end, and so removes the run's checkpoint file
    assert not os.listdir(tmp_path / "checkpoints")
