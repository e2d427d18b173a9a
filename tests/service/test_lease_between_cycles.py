"""The scheduling lease outlives cycles further apart than its TTL: the loop renews it
between them, so a wake long after the last cycle schedules at once, in the same term."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from flotilla.backends.sim import SimBackend
from flotilla.model import JobSpec
from flotilla.service.loop import LoopSettings
from flotilla.store import JobState
from tests.service_builders import service_over
from tests.timing import wait_until

WAIT = 10.0
"""How long the test waits for something before failing (not a performance bound)."""


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    wait_until(predicate, what, WAIT)


def job(name: str) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": name,
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 1}}],
            "payload": {"sim": {"duration": 600}},
        }
    )


def test_a_wake_long_after_the_last_cycle_schedules_in_the_same_term(tmp_path: Path) -> None:
    backend = SimBackend(cluster="sim", nodes=[{"name": "n", "resources": {"cpu": 8}}])
    # A TTL of seconds: renewed every fifth of it, the lease survives the loop's thread being
    # kept off the CPU for most of one (a loaded CI machine did that to a 1 s lease).
    settings = LoopSettings(replica="only", cycle_interval=30.0, lease_ttl=3.0)
    service = service_over({"sim": backend}, root=tmp_path, settings=settings)
    store, loop = service.store, service.loop
    service.start()
    try:
        wait_for(lambda: loop.lease is not None, "the loop to lead")
        assert loop.lease is not None
        term = loop.lease.token
        time.sleep(2 * settings.lease_ttl)  # no cycle since: the lease would have lapsed
        [job_id] = store.submit_jobs([job("late")])
        loop.wake()
        wait_for(lambda: store.get_job(job_id).state is not JobState.QUEUED, "the job's lease")
        assert loop.lease is not None and loop.lease.token == term
    finally:
        service.stop()
        backend.close()
