"""``gpu_sharing: mps`` on the local backend, with a fake ``nvidia-cuda-mps-control`` on PATH
that records how it was called: the backend starts the control daemon for the node's GPUs,
a fractional job runs with its share's MPS limits (which it cannot override), a whole-GPU job
without limits, and the daemon is told to quit when the backend stops its runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flotilla.backends import BackendRunState, DispatchRequest, ReplicaPlacement
from flotilla.backends.interface import Backend
from flotilla.backends.local.gpu_inventory import GPU_ENV
from tests.backends.fake_nvml import install
from tests.backends.support import LocalHarness, node_of, read_all

GIB = 2**30
FAKE_CONTROL = """#!/bin/sh
# Records its arguments, the MPS directories and visible devices it got, and its input.
{
  echo "args: $*"
  echo "pipe: $CUDA_MPS_PIPE_DIRECTORY"
  echo "log: $CUDA_MPS_LOG_DIRECTORY"
  echo "devices: $CUDA_VISIBLE_DEVICES"
  if [ "$1" != "-d" ]; then echo "input: $(cat)"; fi
} >> "$MPS_RECORD"
if [ "$1" = "-d" ]; then mkfifo "$CUDA_MPS_PIPE_DIRECTORY/control"; fi
"""
SHOW = (
    'echo "$CUDA_MPS_PIPE_DIRECTORY|$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'
    '|$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"'
)


@pytest.fixture
def control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake control command first on PATH; returns the file it records into."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-cuda-mps-control"
    script.write_text(FAKE_CONTROL)
    script.chmod(0o755)
    record = tmp_path / "mps-record"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MPS_RECORD", str(record))
    monkeypatch.delenv(GPU_ENV, raising=False)
    install(monkeypatch, "h200-1")
    return record


def gpu_job(backend: Backend, run_id: str, resources: dict[str, float]) -> DispatchRequest:
    return DispatchRequest(
        run_id=run_id,
        job="job-a",
        cluster=backend.cluster,
        placements=(ReplicaPlacement("main", 0, node_of(backend), gpu_ids=(0,)),),
        # The job tries to raise its own limits: the backend's values win.
        payload={
            "command": ["sh", "-c", SHOW],
            "env": {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"},
        },
        resources={"main": resources},
    )


def test_jobs_run_as_mps_clients_limited_to_their_share(local: LocalHarness, control: Path) -> None:
    backend = local.make(gpu_sharing="mps")
    pipe = local.state_dir / "mps" / "pipe"
    started = control.read_text()
    assert "args: -d" in started
    assert f"pipe: {pipe}" in started
    assert f"log: {local.state_dir / 'mps' / 'log'}" in started
    assert "devices: 0" in started

    share = {"cpu": 0.1, "gpu": 0.25, "gpu_memory": 35 * GIB}
    backend.dispatch(gpu_job(backend, "quarter", share))
    assert local.wait_terminal(backend, "quarter").state is BackendRunState.SUCCEEDED
    assert read_all(backend, "quarter") == f"{pipe}|0=35840M|25\n"

    # No gpu_memory: the fraction of the device's 143771 MiB.
    backend.dispatch(gpu_job(backend, "half", {"cpu": 0.1, "gpu": 0.5}))
    local.wait_terminal(backend, "half")
    assert read_all(backend, "half") == f"{pipe}|0={143771 // 2}M|50\n"

    backend.dispatch(gpu_job(backend, "whole", {"cpu": 0.1, "gpu": 1}))
    local.wait_terminal(backend, "whole")
    assert read_all(backend, "whole") == f"{pipe}||100\n"  # only the job's own variable

    backend.close()
    assert "input: quit" in control.read_text()


def test_a_running_daemon_is_kept_and_not_started_twice(local: LocalHarness, control: Path) -> None:
    first = local.make(gpu_sharing="mps", stop_runs_on_close=False)
    first.close()
    second = local.make(gpu_sharing="mps")
    assert control.read_text().count("args: -d") == 1
    assert "already" in second.gpu_notice  # type: ignore[attr-defined]


def test_mps_without_the_control_command_is_refused_naming_the_setting(
    local: LocalHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(GPU_ENV, raising=False)
    install(monkeypatch, "h200-1")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ValueError, match=r"gpu_sharing: .*nvidia-cuda-mps-control is not on PATH"):
        local.make(gpu_sharing="mps")
