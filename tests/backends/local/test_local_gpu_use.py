"""The local backend samples each run's GPU use and, with ``gpu_sharing: monitor``, stops a
run over its GPU memory share. The GPU is the fake NVML's H200 (``h200-1``) whose one process
is the job's own: the command writes its pid where the fake reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from flotilla.backends import BackendRunState, DispatchRequest, ReplicaPlacement
from flotilla.backends.interface import Backend, RunStatus
from flotilla.backends.local.gpu_inventory import GPU_ENV
from tests.backends.fake_nvml import install, job_on_gpu, writes_its_pid
from tests.backends.support import LocalHarness, node_of

GIB = 2**30


def gpu_request(
    backend: Backend, pid_file: Path, resources: dict[str, float], then: str = "exec sleep 30"
) -> DispatchRequest:
    """One replica on device 0, whose command writes its pid and sleeps."""
    command = writes_its_pid(pid_file, then)
    return DispatchRequest(
        run_id="run-1",
        job="job-a",
        cluster="local",
        placements=(ReplicaPlacement("main", 0, node_of(backend), gpu_ids=(0,)),),
        payload={"command": ["sh", "-c", command]},
        resources={"main": resources},
    )


@pytest.fixture(autouse=True)
def _discovered(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The H200 whose one process is whatever pid the job wrote to ``tmp_path / "pid"``."""
    monkeypatch.delenv(GPU_ENV, raising=False)
    install(monkeypatch, "h200-1").processes_of = job_on_gpu(tmp_path / "pid")


def test_monitor_stops_a_run_over_its_gpu_memory_share(local: LocalHarness, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    backend = local.make(
        gpu_sharing="monitor",
        gpu_sample_interval=0.02,
        isolate=False,
    )
    request = gpu_request(backend, pid_file, {"cpu": 0.1, "gpu": 0.25, "gpu_memory": 35 * GIB})
    backend.dispatch(request)
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.FAILED
    assert status.message == "used 60Gi of GPU memory, its share is 35Gi"
    assert status.over_limit
    assert status.gpu is not None and status.gpu.memory_peak == 60 * GIB


def test_monitor_kills_a_run_over_its_share_that_ignores_sigterm(
    local: LocalHarness, tmp_path: Path
) -> None:
    """The stop is a stop like a cancel's: SIGTERM, then SIGKILL once the grace period is
    over; a command that ignores SIGTERM does not keep its GPU memory."""
    pid_file = tmp_path / "pid"
    backend = local.make(
        gpu_sharing="monitor",
        gpu_sample_interval=0.02,
        isolate=False,
    )
    deaf = "trap '' TERM; exec sleep 600"  # SIGTERM stays ignored across the exec
    resources = {"cpu": 0.1, "gpu": 0.25, "gpu_memory": 35 * GIB}
    backend.dispatch(gpu_request(backend, pid_file, resources, then=deaf))
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.FAILED
    assert status.message == "used 60Gi of GPU memory, its share is 35Gi"
    assert status.over_limit
    [replica] = status.replicas
    assert replica.exit_code == -9, replica  # killed: it ignored the SIGTERM


def test_monitor_lets_a_whole_gpu_job_that_sets_gpu_memory_use_its_gpu(
    local: LocalHarness, tmp_path: Path
) -> None:
    """``gpu_memory`` sizes a share of a device; a job given a whole device holds all of it:
    60Gi used of a device whose job asked gpu: 1 and gpu_memory: 35Gi is not over."""
    pid_file = tmp_path / "pid"
    backend = local.make(
        gpu_sharing="monitor",
        gpu_sample_interval=0.02,
        isolate=False,
    )
    request = gpu_request(backend, pid_file, {"cpu": 0.1, "gpu": 1, "gpu_memory": 35 * GIB})
    backend.dispatch(request)

    def sampled_using_it(status: RunStatus) -> bool:
        return status.state.terminal or (
            status.gpu is not None and status.gpu.samples >= 3 and status.gpu.memory_used > 0
        )

    status = local.wait(backend, "run-1", sampled_using_it, "sampled while it used its GPU")
    assert status.state is BackendRunState.RUNNING, status.message
    assert status.gpu is not None and status.gpu.memory_used == 60 * GIB


def test_telemetry_reports_a_runs_gpu_memory_and_utilisation(
    local: LocalHarness, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    backend = local.make(gpu_sample_interval=0.02, isolate=False)
    request = gpu_request(backend, pid_file, {"cpu": 0.1, "gpu": 1})
    backend.dispatch(request)

    def sampled_twice(status: RunStatus) -> bool:
        return status.gpu is not None and status.gpu.samples >= 2 and status.gpu.memory_used > 0

    status = local.wait(backend, "run-1", sampled_twice, "sampled")
    assert status.state is BackendRunState.RUNNING  # a whole device: no share to exceed
    assert status.gpu is not None
    assert status.gpu.memory_used == 60 * GIB
    assert status.gpu.utilization == pytest.approx(97.0)
    # Held from the first sample; busy (97 %) only once the command had written its pid.
    assert status.gpu.efficiency is not None
    assert 0 < status.gpu.efficiency <= 0.97 + 1e-9
