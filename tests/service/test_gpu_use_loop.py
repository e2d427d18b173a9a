"""Through the scheduler loop and the store: a job's GPU use, sampled by the local backend
from the fake NVML's H200 whose one process (60 GiB, 97 % busy) is reported as the job's own,
is kept with its run; with ``gpu_sharing: monitor`` a job over its share fails with the
reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from flotilla.backends.local.backend import LocalBackend
from flotilla.backends.local.gpu_inventory import GPU_ENV
from flotilla.model import JobSpec
from flotilla.store import JobState, SqlStore
from tests.backends.fake_nvml import install, job_on_gpu, writes_its_pid
from tests.service_builders import loop_over
from tests.timing import wait_until

LIMIT = 60.0
GIB = 2**30


def spec(pid_file: Path, resources: dict[str, object], seconds: float) -> JobSpec:
    command = writes_its_pid(pid_file, f"sleep {seconds}")
    return JobSpec.model_validate(
        {
            "name": "trainer",
            "queue": "default",
            "tasks": [{"name": "main", "resources": resources}],
            "payload": {"command": ["sh", "-c", command]},
        }
    )


@pytest.mark.parametrize(
    ("sharing", "resources", "ends", "reason"),
    [
        ("shared", {"cpu": 0.1, "gpu": 1}, JobState.SUCCEEDED, ""),
        (
            "monitor",
            {"cpu": 0.1, "gpu": 0.25, "gpu_memory": "35Gi"},
            JobState.FAILED,
            "used 60Gi of GPU memory, its share is 35Gi",
        ),
    ],
)
def test_a_jobs_gpu_use_is_kept_with_its_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sharing: str,
    resources: dict[str, object],
    ends: JobState,
    reason: str,
) -> None:
    monkeypatch.delenv(GPU_ENV, raising=False)
    pid_file = tmp_path / "pid"
    install(monkeypatch, "h200-1").processes_of = job_on_gpu(pid_file)
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    backend = LocalBackend(
        cluster="local",
        state_dir=tmp_path / "runs",
        grace_period=1.0,
        stop_runs_on_close=True,
        isolate=False,
        gpu_sharing=sharing,
        gpu_sample_interval=0.05,
    )
    loop = loop_over(store, {"local": backend}, cycle_interval=0.05, replica="gpu")
    try:
        [job] = store.submit_jobs([spec(pid_file, resources, 1.0)])
        wait_until(
            lambda: store.get_job(job).state in (JobState.SUCCEEDED, JobState.FAILED),
            lambda: f"the job to end: {store.get_job(job).state}",
            LIMIT,
            0.05,
            loop.cycle,
        )
        record = store.get_job(job)
        assert record.state is ends
        if reason:
            assert reason in record.reason
        [run] = store.runs(job)
        assert run.gpu is not None
        assert run.gpu.memory_peak == 60 * GIB
        assert run.gpu.held_gpu_seconds > 0
        assert run.gpu.used_gpu_seconds > 0
        labels = {"cluster": "local", "queue": "default"}
        registry = loop.metrics.registry
        held = registry.get_sample_value("flotilla_gpu_held_seconds_total", labels)
        used = registry.get_sample_value("flotilla_gpu_used_seconds_total", labels)
        # A quarter GPU whose process kept the whole device 97 % busy uses more than it
        # holds: monitor limits memory, not compute.
        assert held == pytest.approx(run.gpu.held_gpu_seconds)
        assert used == pytest.approx(run.gpu.used_gpu_seconds)
        # Ended: it holds no GPU memory any more.
        assert registry.get_sample_value("flotilla_gpu_memory_used_bytes", labels) == 0
    finally:
        loop.close()
        backend.close()
        store.close()
