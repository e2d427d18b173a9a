"""`flotilla clusters --nodes` shows each node's GPUs as discovery found them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flotilla.backends.local.backend import LocalBackend
from flotilla.backends.local.gpu_inventory import GPU_ENV
from flotilla.cli.main import app
from flotilla.service.records import cluster_spec_from_inventory
from flotilla.store import SqlStore
from tests.backends.fake_nvml import install


def test_clusters_nodes_shows_the_discovered_gpus(
    servers: list[str], store: SqlStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(GPU_ENV, raising=False)
    install(monkeypatch, "a100-8-nvlink")
    backend = LocalBackend(state_dir=tmp_path / "local", node_name="dgx")
    try:
        nodes = backend.inventory().nodes
    finally:
        backend.close()
    store.upsert_cluster(cluster_spec_from_inventory("local", "local", nodes))
    shown = CliRunner().invoke(app, ["clusters", "--nodes"])
    assert shown.exit_code == 0, shown.output
    assert "8 × NVIDIA A100-SXM4-80GB, 80Gi each, nvlink, 2 NUMA nodes" in shown.output
    data = json.loads(CliRunner().invoke(app, ["clusters", "--nodes", "--format", "json"]).output)
    [node] = data["nodes"]["local"]
    assert node["gpus"]["model"] == "NVIDIA A100-SXM4-80GB"
    assert node["gpus"]["topology"]["numa"] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert node["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
