"""The local backend's GPU sampler over the fake NVML, with real processes: a job whose
workers leave its session (``torchrun``'s shape) is metered and stopped by ``monitor``; the
sampler raising does not stop the monitor thread's ``max_runtime`` enforcement, and its error
is reported once."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml
import pytest

from flotilla.backends import BackendRunState, DispatchRequest, ReplicaPlacement
from flotilla.backends.local.gpu_inventory import GPU_ENV
from tests.backends.fake_nvml import FakeGpu, FakeProcess, install, writes_its_pid
from tests.backends.support import LocalHarness, node_of

GIB = 2**30


def host_pids(marker: str) -> list[int]:
    """The pids, as this machine's NVML sees them (not a PID namespace's), of every process
    running ``sleep <marker>``."""
    wanted = f"sleep\0{marker}\0".encode()
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if Path(entry.path, "cmdline").read_bytes() == wanted:
                    found.append(int(entry.name))
    return sorted(found)


def workers_on_gpu(marker: str, memory: int) -> Callable[[FakeGpu], list[FakeProcess]]:
    """Each worker (a ``sleep <marker>``) holds ``memory`` on the device."""
    return lambda gpu: [FakeProcess(pid, memory) for pid in host_pids(marker)]


def torchrun_shaped(marker: str, workers: int) -> str:
    """Shell: a launcher that starts ``workers`` workers, each in a session of its own
    (``setsid``, as torchrun's do), then waits for them."""
    return f"for i in $(seq {workers}); do setsid sleep {marker} & done; wait"


@pytest.fixture
def marker() -> Iterator[str]:
    """A ``sleep`` argument no other test's process has."""
    marker = f"60.{random.randrange(10**8):08d}"
    yield marker
    for pid in host_pids(marker):  # the ones a run without cgroups leaves behind
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("isolate", [True, False], ids=["cgroups", "descendants"])
def test_a_torchrun_shaped_job_is_metered_and_stopped_by_monitor(
    local: LocalHarness, marker: str, monkeypatch: pytest.MonkeyPatch, isolate: bool
) -> None:
    """Two workers in sessions of their own hold 20 GiB each: the run holds 40 GiB, over its
    35 GiB share, and is stopped (its launcher holds none, and leads neither's group)."""
    monkeypatch.delenv(GPU_ENV, raising=False)
    install(monkeypatch, "h200-1").processes_of = workers_on_gpu(marker, 20 * GIB)
    backend = local.make(gpu_sharing="monitor", gpu_sample_interval=0.02, isolate=isolate)
    backend.dispatch(
        DispatchRequest(
            run_id="run-1",
            job="job-a",
            cluster=backend.cluster,
            placements=(ReplicaPlacement("main", 0, node_of(backend), gpu_ids=(0,)),),
            payload={"command": ["sh", "-c", torchrun_shaped(marker, 2)]},
            resources={"main": {"cpu": 0.1, "gpu": 0.25, "gpu_memory": 35 * GIB}},
        )
    )
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.FAILED, status.message
    assert status.message == "used 40Gi of GPU memory, its share is 35Gi"
    assert status.gpu is not None and status.gpu.memory_peak == 40 * GIB
    if isolate and backend._trees.hierarchy is not None:  # type: ignore[attr-defined]
        deadline = time.monotonic() + 10  # cgroups end the workers with their run
        while host_pids(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not host_pids(marker), "workers outlived their run"


def test_the_sampler_raising_does_not_stop_max_runtime_enforcement(
    local: LocalHarness,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The binding raises what ``NVMLError`` is not (its library-mismatch error, on a driver
    older than it) at every sample: the run is still stopped at its ``max_runtime`` by the
    monitor thread (nobody polls meanwhile), and the error is logged once, not per sample."""
    monkeypatch.delenv(GPU_ENV, raising=False)
    fake = install(monkeypatch, "h200-1")
    fake.fail["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVMLLibraryMismatchError(
        "Unversioned function called and the pyNVML version does not match the NVML lib version."
    )
    caplog.set_level(logging.WARNING)
    backend = local.make(gpu_sample_interval=0.02, isolate=False)
    pid_file = tmp_path / "pid"
    backend.dispatch(
        DispatchRequest(
            run_id="run-1",
            job="job-a",
            cluster=backend.cluster,
            placements=(ReplicaPlacement("main", 0, node_of(backend), gpu_ids=(0,)),),
            payload={"command": ["sh", "-c", writes_its_pid(pid_file, "exec sleep 60")]},
            resources={"main": {"cpu": 0.1, "gpu": 1}},
            max_runtime=1.0,
        )
    )
    deadline = time.monotonic() + 20
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    pid = int(pid_file.read_text())
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # no status, no poll: only the monitor thread can stop it
    assert not Path(f"/proc/{pid}").exists(), "max_runtime was not enforced"
    assert fake.calls.count("nvmlDeviceGetComputeRunningProcesses") > 2  # sampled on and on
    status = local.wait_terminal(backend, "run-1")
    assert status.state is BackendRunState.FAILED
    assert status.message == "exceeded max_runtime of 1s"
    reported = [r.getMessage() for r in caplog.records if "GPU sampler error" in r.getMessage()]
    assert len(reported) == 1, reported
    assert "NVMLLibraryMismatchError" in reported[0]
