"""A job submitted without ``user`` belongs to whoever's token submitted it, and the
scheduler counts it as theirs: an owner's limit holds only their jobs, and owners share a
queue by DRF (issue 28's owner level, through the API). A real service over a sim backend,
its loop cycled by hand."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from flotilla.app import ApiConfig, Service
from flotilla.backends.sim import FakeClock, SimBackend
from flotilla.model import QueueSpec
from flotilla.server import AuthSettings
from flotilla.server.auth import token_hash
from flotilla.store import JobState
from tests.server.api_support import spec, submit
from tests.service_builders import service_over

USERS = ("alice", "bob")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    """One 4-cpu node; runs last far longer than the test (the sim's clock never moves)."""
    backend = SimBackend(
        state_dir=tmp_path / "sim",
        nodes=[{"name": "n", "resources": {"cpu": 4, "memory": "16Gi"}}],
        clock=FakeClock(),
        default_duration=1000.0,
    )
    auth = AuthSettings.from_data(
        {
            "users": [
                {
                    "name": name,
                    "token_sha256": token_hash(f"{name}-token"),
                    "queues": {"*": ["submit", "read"]},
                }
                for name in USERS
            ]
        }
    )
    api = ApiConfig(auth=auth, poll_interval=0.01, any_host=True)
    built = service_over({"sim": backend}, root=tmp_path, api=api, replica="owners")
    try:
        yield built
    finally:
        built.stop()
        backend.close()


def as_user(service: Service, name: str) -> TestClient:
    return TestClient(service.app(), headers={"Authorization": f"Bearer {name}-token"})


def submit_jobs(service: Service, name: str, count: int) -> list[str]:
    """``count`` 1-cpu jobs, none naming a ``user``, with ``name``'s token."""
    jobs = [spec(f"{name}-{i}", queue="default", tasks=[one_cpu()]) for i in range(count)]
    return submit(as_user(service, name), {"jobs": jobs})


def one_cpu() -> dict[str, Any]:
    return {"name": "main", "resources": {"cpu": 1}}


def running_per_owner(service: Service) -> dict[str, int]:
    service.loop.cycle()
    counts = dict.fromkeys(USERS, 0)
    for job in service.store.list_jobs().jobs:
        if job.state in (JobState.LEASED, JobState.PENDING, JobState.RUNNING):
            counts[job.owner or "(none)"] = counts.get(job.owner or "(none)", 0) + 1
    return counts


def test_an_owner_limit_holds_each_token_users_jobs_without_a_user_field(
    service: Service,
) -> None:
    service.store.put_queue(
        QueueSpec.model_validate(
            {"name": "default", "owners": {"order": "queue", "max_running_jobs": 2}}
        )
    )
    alice = submit_jobs(service, "alice", 4)
    submit_jobs(service, "bob", 1)
    assert service.store.get_job(alice[0]).owner == "alice"
    assert running_per_owner(service) == {"alice": 2, "bob": 1}
    assert service.loop.pending_reason(alice[2]) == (
        "owner alice is at the limit of 2 running jobs per owner in queue default"
    )


def test_owners_share_a_queue_by_drf_without_a_user_field(service: Service) -> None:
    service.store.put_queue(QueueSpec.model_validate({"name": "default", "owners": {}}))
    submit_jobs(service, "alice", 4)  # first in the queue's order: all 4 cpu, without owners
    submit_jobs(service, "bob", 2)
    assert running_per_owner(service) == {"alice": 2, "bob": 2}
