"""A non-strict gang grows in the service on Kubernetes (the API-server double, whose kubelet
runs pods as local processes) and on Ray (a real head): a 4-replica job with ``min_member: 2``
starts with the 2 replicas that fit beside another job; once that job is cancelled, the run
it started with grows to 4 replicas on the engine, each with its own rank, and the job
succeeds when every replica has exited 0. (``test_gang_growth.py``: the same on ``sim``,
``test_local_gang_growth.py`` on ``local``.)"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from flotilla.backends import Backend, BackendRunState, LogsRequest, StatusRequest
from flotilla.backends.kubernetes import KubernetesBackend
from flotilla.backends.ray import RayBackend
from flotilla.model import JobSpec, QueueSpec
from flotilla.model.scenario import Mode
from flotilla.service.records import cluster_spec_from_inventory
from flotilla.store import TERMINAL_JOB_STATES, JobState, SqlStore
from tests.backends.engines.fake_kube_apiserver import FakeApiServer
from tests.backends.engines.ray_head import RayHead
from tests.service_builders import loop_over
from tests.timing import wait_until

ENGINE_LIMIT = 240.0
"""Seconds the service may take to get somewhere: a Ray job needs about 4 s to start on an
idle machine, far more on a loaded one; reaching the limit fails the test."""


class EngineService:
    """The scheduling loop over a real store and one engine's backend (2 CPUs: the node of the
    API-server double, or the Ray head's)."""

    def __init__(self, root: Path, engine: str, backend: Backend) -> None:
        self.root = root
        self.backend = backend
        self.store = SqlStore.open(f"sqlite:///{root / 'flotilla.db'}")
        self.store.put_queue(QueueSpec(name="default"))
        nodes = backend.inventory().nodes
        self.store.upsert_cluster(cluster_spec_from_inventory(backend.cluster, engine, nodes))
        self.loop = loop_over(
            self.store,
            {backend.cluster: backend},
            register=False,
            replica="test",
            cycle_interval=0.05,
            mode=Mode.SYNC,
        )

    def submit(self, name: str, command: str, cpu: float, **fields: object) -> str:
        replicas = fields.pop("replicas", 1)
        spec = {
            "name": name,
            "queue": "default",
            "tasks": [{"name": "worker", "replicas": replicas, "resources": {"cpu": cpu}}],
            "payload": {"command": command},
            **fields,
        }
        return self.store.submit_jobs([JobSpec.model_validate(spec)])[0]

    def placed(self, job_id: str) -> int:
        run = self.store.get_job(job_id).run
        return 0 if run is None else len(run.assignment["placements"])

    def cycle_until(self, done: Callable[[], bool], what: str) -> None:
        wait_until(done, what, ENGINE_LIMIT, 0.1, self.loop.cycle)

    def close(self) -> None:
        self.loop.close()
        self.backend.close()
        self.store.close()


def grows_to_full_size(service: EngineService) -> None:
    gate = service.root / "finish"
    blocker = service.submit("blocker", "sleep 600", cpu=1.0)
    service.cycle_until(lambda: service.placed(blocker) == 1, "the blocker placed")
    script = (
        f'echo "member rank=$RANK world=$WORLD_SIZE"; while [ ! -e {gate} ]; do sleep 0.05; done'
    )
    gang = service.submit(
        "elastic",
        script,
        cpu=0.5,
        replicas=4,
        gang={"mode": "non-strict", "min_member": 2},
    )
    service.cycle_until(lambda: service.placed(gang) == 2, "the gang started with 2")
    for _ in range(3):
        service.loop.cycle()
    assert service.placed(gang) == 2  # no room for more beside the blocker
    reason = service.loop.pending_reason(gang) or ""
    assert reason.startswith("2 of 4 replicas placed; the rest wait: "), reason

    service.store.cancel(blocker, "make room")
    service.cycle_until(lambda: service.placed(gang) == 4, "the gang grown to 4")
    job = service.store.get_job(gang)
    assert job.run is not None and len(service.store.runs(gang)) == 1  # the same run, grown
    run_id = job.run.id

    def every_replica_running() -> bool:
        status = service.backend.status(StatusRequest(run_id))
        return [r.state for r in status.replicas] == [BackendRunState.RUNNING] * 4

    service.cycle_until(every_replica_running, "4 replicas running on the engine")
    assert service.store.get_job(gang).state is JobState.RUNNING
    gate.touch()
    service.cycle_until(
        lambda: service.store.get_job(gang).state in TERMINAL_JOB_STATES, "the gang ended"
    )
    assert service.store.get_job(gang).state is JobState.SUCCEEDED
    status = service.backend.status(StatusRequest(run_id))
    assert [(r.replica, r.state) for r in status.replicas] == [
        (index, BackendRunState.SUCCEEDED) for index in range(4)
    ]
    ranks = []
    for index in range(4):
        text = service.backend.logs(LogsRequest(run_id, task="worker", replica=index)).text
        ranks += [line.split()[1] for line in text.splitlines() if line.startswith("member")]
    assert ranks == ["rank=0", "rank=1", "rank=2", "rank=3"]


@pytest.fixture
def kube_service(tmp_path: Path) -> Iterator[EngineService]:
    server = FakeApiServer()
    server.cluster.add_node("node-a", cpu="2", memory="8Gi")
    backend = KubernetesBackend(
        cluster="kube",
        kubeconfig=server.kubeconfig(tmp_path / "kubeconfig"),
        grace_period=1.0,
        watch_timeout=5,
        request_timeout=5.0,
    )
    service = EngineService(tmp_path, "kubernetes", backend)
    try:
        yield service
    finally:
        service.close()
        server.close()


@pytest.fixture
def ray_service(tmp_path: Path, ray_head: RayHead) -> Iterator[EngineService]:
    backend = RayBackend(
        cluster=f"ray-{uuid.uuid4().hex[:8]}", address=ray_head.address, grace_period=1.0
    )
    service = EngineService(tmp_path, "ray", backend)
    try:
        yield service
    finally:
        for job_id in (job.id for job in service.store.list_jobs().jobs):
            if service.store.get_job(job_id).state not in TERMINAL_JOB_STATES:
                service.store.cancel(job_id, "the test ended")
        service.loop.cycle()  # the cancels reach Ray: nothing of the test keeps running
        service.close()


def test_a_non_strict_gang_grows_to_full_size_on_kubernetes(kube_service: EngineService) -> None:
    grows_to_full_size(kube_service)


@pytest.mark.xdist_group("ray")
def test_a_non_strict_gang_grows_to_full_size_on_ray(ray_service: EngineService) -> None:
    grows_to_full_size(ray_service)
