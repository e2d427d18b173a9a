"""A ``gpu_memory`` job runs on a local node whose GPU was discovered (the fake NVML's H200):
the scheduler places it on the device, and the process sees that device only, by its UUID."""

from __future__ import annotations

from pathlib import Path

import pytest

from flotilla.backends.interface import LogsRequest
from flotilla.backends.local.backend import LocalBackend
from flotilla.backends.local.gpu_inventory import GPU_ENV
from flotilla.model import JobSpec
from flotilla.store import JobState, SqlStore
from tests.backends.fake_nvml import H200_UUID, install
from tests.service_builders import loop_over
from tests.timing import wait_until

LIMIT = 60.0


def test_a_gpu_memory_share_runs_on_the_discovered_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(GPU_ENV, raising=False)
    install(monkeypatch, "h200-1")
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    backend = LocalBackend(
        cluster="local",
        state_dir=tmp_path / "runs",
        grace_period=1.0,
        stop_runs_on_close=True,
    )
    loop = loop_over(store, {"local": backend}, cycle_interval=0.05, replica="gpu")
    try:
        spec = JobSpec.model_validate(
            {
                "name": "share",
                "queue": "default",
                "tasks": [
                    {"name": "main", "resources": {"cpu": 0.1, "gpu": 0.25, "gpu_memory": "10Gi"}}
                ],
                "payload": {"command": ["sh", "-c", 'echo "[$CUDA_VISIBLE_DEVICES]"']},
            }
        )
        [job] = store.submit_jobs([spec])
        wait_until(
            lambda: store.get_job(job).state is JobState.SUCCEEDED,
            lambda: f"the job to succeed: {store.get_job(job).state}",
            LIMIT,
            0.05,
            loop.cycle,
        )
        assert loop.logs(job, LogsRequest(run_id="")).data == f"[{H200_UUID}]\n".encode()
    finally:
        loop.close()
        backend.close()
        store.close()
