"""A node whose GPUs were discovered (model, memory per device) takes ``gpu_memory`` jobs at
submit, and refuses only those no device of the fleet could hold, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from flotilla.backends.local.backend import LocalBackend
from flotilla.backends.local.gpu_inventory import GPU_ENV
from flotilla.service.records import cluster_spec_from_inventory
from flotilla.store import SqlStore
from tests.backends.fake_nvml import install
from tests.builders import task
from tests.server.api_support import spec, submit


def local_cluster(
    store: SqlStore, state_dir: Path, machine: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local cluster as `flotilla up` reports it, on a fake NVML machine (or none)."""
    if machine is not None:
        install(monkeypatch, machine)
    backend = LocalBackend(state_dir=state_dir)
    try:
        nodes = backend.inventory().nodes
    finally:
        backend.close()
    store.upsert_cluster(cluster_spec_from_inventory("local", "local", nodes))


def test_a_gpu_memory_job_fits_a_discovered_h200(
    lifecycle_client: TestClient,
    any_store: SqlStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(GPU_ENV, raising=False)
    local_cluster(any_store, tmp_path, "h200-1", monkeypatch)
    shared = {"cpu": 1, "gpu": 0.25, "gpu_memory": "10Gi"}
    whole = {"cpu": 1, "gpu": 1, "gpu_memory": "120Gi"}
    assert (
        len(
            submit(
                lifecycle_client,
                {
                    "jobs": [
                        spec("share", tasks=[task(**shared)]),
                        spec("whole", tasks=[task(**whole)]),
                    ]
                },
            )
        )
        == 2
    )
    too_big = spec("too-big", tasks=[task(cpu=1, gpu=0.5, gpu_memory="200Gi")])
    response = lifecycle_client.post("/v1/jobs", json=too_big)
    assert response.status_code == 422, response.text
    assert response.json()["problems"] == [
        "tasks[0].resources.gpu_memory: 200Gi per replica, but the largest node of the fleet "
        "has 140.401Gi"
    ]


def test_a_fraction_asking_more_than_one_device_holds_is_refused_on_an_nvlink_box(
    lifecycle_client: TestClient,
    any_store: SqlStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """8 × 80Gi is 640Gi on the node, but a fraction runs on one device: 100Gi never fits."""
    monkeypatch.delenv(GPU_ENV, raising=False)
    local_cluster(any_store, tmp_path, "a100-8-nvlink", monkeypatch)
    fits = spec("four", tasks=[task(cpu=1, gpu=4, gpu_memory="300Gi")])
    assert len(submit(lifecycle_client, fits)) == 1
    response = lifecycle_client.post(
        "/v1/jobs", json=spec("big-share", tasks=[task(cpu=1, gpu=0.5, gpu_memory="100Gi")])
    )
    assert response.status_code == 422, response.text
    assert response.json()["problems"][0].startswith(
        "tasks[0].resources.gpu_memory: 100Gi on one GPU"
    )


def test_gpus_counted_by_the_environment_offer_no_gpu_memory(
    lifecycle_client: TestClient,
    any_store: SqlStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A count alone says nothing of the memory: the scheduler could never place a
    ``gpu_memory`` job there, so it is refused at submit rather than left queued for ever."""
    monkeypatch.setenv(GPU_ENV, "1")
    local_cluster(any_store, tmp_path, None, monkeypatch)
    assert len(submit(lifecycle_client, spec("share", tasks=[task(cpu=1, gpu=0.5)]))) == 1
    response = lifecycle_client.post(
        "/v1/jobs", json=spec("memory", tasks=[task(cpu=1, gpu=0.5, gpu_memory="10Gi")])
    )
    assert response.status_code == 422, response.text
    assert response.json()["problems"] == [
        "tasks[0].resources.gpu_memory: 10Gi per replica, but the largest node of the fleet has 0"
    ]
