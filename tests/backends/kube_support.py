"""What the kubernetes backend's own tests share: a backend over the fake API server whose
kubelet runs nothing (``Manual``; the ``manual`` fixture in conftest.py), a GPU request, and a
bounded wait."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flotilla.backends import ReplicaPlacement, load_backend
from flotilla.backends.kubernetes import KubernetesBackend
from tests.timing import deadline

from .engines.fake_kube_apiserver import FakeApiServer
from .engines.fake_kube_cluster import FakeCluster
from .support import WAIT_LIMIT


def until(condition: Callable[[], Any], what: str) -> Any:
    due = deadline(WAIT_LIMIT)
    while not (value := condition()):
        assert not due.expired(), f"never in {due.allowed:.0f}s: {what}"
        time.sleep(0.02)
    return value


def make(kubeconfig: Path, **settings: Any) -> KubernetesBackend:
    backend = load_backend(
        "kubernetes", cluster="gpu-cluster", kubeconfig=str(kubeconfig), **settings
    )
    assert isinstance(backend, KubernetesBackend)
    return backend


@dataclass
class Manual:
    """A fake API server whose kubelet runs nothing (the test moves pods through phases), and
    the backends a test made over it, closed when the test ends."""

    server: FakeApiServer
    kubeconfig: Path
    made: list[KubernetesBackend] = field(default_factory=list)

    @property
    def cluster(self) -> FakeCluster:
        return self.server.cluster

    def backend(self, **settings: Any) -> KubernetesBackend:
        backend = make(self.kubeconfig, **settings)
        self.made.append(backend)
        return backend


def gpu_request(run_id: str, replicas: int = 2, **fields: Any) -> Any:
    from flotilla.backends import DispatchRequest

    return DispatchRequest(
        run_id=run_id,
        job="team-a/train-7",
        cluster="gpu-cluster",
        placements=tuple(ReplicaPlacement("worker", i, "gpu-1", (i,)) for i in range(replicas)),
        payload={"image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["torchrun", "x.py"]},
        job_type="container",
        resources={"worker": {"cpu": 2.5, "memory": 8 * 2**30, "gpu": 1}},
        labels={"team": "a", "not a valid key!": "x"},
        tolerations=({"key": "spot", "operator": "Exists", "effect": "NoSchedule"},),
        **fields,
    )


def only_job(cluster: FakeCluster) -> dict[str, Any]:
    jobs = cluster.list("Job")
    assert len(jobs) == 1
    return jobs[0]
