"""A named gang's members time out together (issue 36), in the service as in the simulator
(``tests/scenarios/policies/gang-timeout.yaml``): when one member's ``gang.timeout`` passes,
every member still queued fails with it — the gang can no longer be whole — rather than each
at its own time. Real store (SQLite) and loop, a local cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.model import JobSpec
from flotilla.store import JobState
from tests.service.test_service_loop import Service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    running = Service(tmp_path)
    yield running
    running.close()


def member(service: Service, name: str, timeout: float) -> str:
    spec = JobSpec.model_validate(
        {
            "name": name,
            "queue": "default",
            "gang": {"name": "pair", "min_member": 3, "timeout": timeout},
            "tasks": [{"name": "main", "resources": {"cpu": 0.1}}],
            "payload": {"command": ["true"]},
        }
    )
    return service.store.submit_jobs([spec])[0]


def test_a_named_gangs_queued_members_fail_together(service: Service) -> None:
    quick = member(service, "quick", timeout=1)
    patient = member(service, "patient", timeout=600)  # 2 of its 3 members: it never starts
    service.cycle_until(lambda: service.state(quick) is JobState.FAILED)
    assert service.state(patient) is JobState.FAILED
    for job in (quick, patient):
        assert "gang" in service.store.get_job(job).reason
