"""A non-strict gang grows on the local backend: real processes. A 4-replica job with
``min_member: 2`` starts with the 2 replicas that fit beside another job; when that job is
cancelled, the other 2 start as processes of the same run, with their ranks and the run's new
world size, and the job succeeds once every replica has exited 0."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.backends.interface import BackendRunState, StatusRequest
from flotilla.model import JobSpec
from flotilla.store import JobState
from tests.service.test_service_loop import Service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    running = Service(tmp_path)
    yield running
    running.close()


def test_a_non_strict_gang_grows_to_full_size_on_local_processes(
    service: Service, tmp_path: Path
) -> None:
    cores = float(service.backend.inventory().nodes[0].capacity["cpu"])
    gate, ranks = tmp_path / "finish", tmp_path / "ranks"
    ranks.mkdir()
    blocker = service.store.submit_jobs(
        [
            JobSpec.model_validate(
                {
                    "name": "blocker",
                    "queue": "default",
                    "tasks": [{"name": "main", "resources": {"cpu": cores / 2}}],
                    "payload": {"command": ["sleep", "600"]},
                }
            )
        ]
    )[0]
    service.cycle_until(lambda: service.state(blocker) is JobState.RUNNING)
    script = f'echo "$WORLD_SIZE" > {ranks}/"$RANK"; while [ ! -e {gate} ]; do sleep 0.05; done'
    gang = service.store.submit_jobs(
        [
            JobSpec.model_validate(
                {
                    "name": "elastic",
                    "queue": "default",
                    "tasks": [{"name": "worker", "replicas": 4, "resources": {"cpu": cores / 4}}],
                    "gang": {"mode": "non-strict", "min_member": 2},
                    "payload": {"command": ["sh", "-c", script]},
                }
            )
        ]
    )[0]
    service.cycle_until(lambda: sorted(path.name for path in ranks.iterdir()) == ["0", "1"])
    assert {(ranks / name).read_text().strip() for name in ("0", "1")} == {"2"}

    service.store.cancel(blocker, "make room")
    service.cycle_until(lambda: len(list(ranks.iterdir())) == 4)
    assert (ranks / "2").read_text().strip() == (ranks / "3").read_text().strip() == "4"
    job = service.store.get_job(gang)
    assert job.run is not None and len(service.store.runs(gang)) == 1
    status = service.backend.status(StatusRequest(job.run.id))
    assert [replica.state for replica in status.replicas] == [BackendRunState.RUNNING] * 4
    gate.touch()
    service.cycle_until(lambda: service.state(gang) is JobState.SUCCEEDED)
