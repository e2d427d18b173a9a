"""A local cluster's ``gpu_sharing`` reaches its backend, which enforces ``monitor`` and
``mps`` (issue 26); changing it rebuilds the backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flotilla.backends.sim import SimBackend
from flotilla.model.fleet_loader import fleet_from_data
from flotilla.service.fleet import FleetRuntime
from flotilla.store import SqlStore


def fleet(sharing: str) -> Any:
    return fleet_from_data(
        {
            "name": "f",
            "clusters": [{"name": "local", "backend": "local", "gpu_sharing": sharing}],
            "queues": [{"name": "default"}],
        }
    )


def test_the_local_backend_gets_the_clusters_gpu_sharing(tmp_path: Path) -> None:
    built: list[dict[str, Any]] = []

    def factory(backend: str, **settings: Any) -> SimBackend:
        built.append(settings)
        return SimBackend(cluster=settings["cluster"])

    store = SqlStore.open(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        runtime = FleetRuntime(store, {}, local_state_dir=tmp_path / "state", factory=factory)
        runtime.install(fleet("monitor"), 1)
        assert built[-1]["gpu_sharing"] == "monitor"
        runtime.install(fleet("mps"), 2)
        assert len(built) == 2 and built[-1]["gpu_sharing"] == "mps"
        runtime.install(fleet("shared"), 3)  # placement only: the backend's default
        assert len(built) == 3 and "gpu_sharing" not in built[-1]
    finally:
        for backend in runtime.backends.values():
            backend.close()
        store.close()
