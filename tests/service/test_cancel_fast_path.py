"""While a cancel is pending, the loop asks only about the runs being cancelled."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from flotilla.backends.interface import RunStatus, StatusRequest
from flotilla.backends.sim import SimBackend
from flotilla.model import JobSpec, QueueSpec
from flotilla.service.loop import LoopSettings, SchedulingLoop
from flotilla.service.records import cluster_spec_from_inventory
from flotilla.store import ACTIVE_JOB_STATES, JobState, SqlStore


class CountingSim(SimBackend):
    """A sim backend that counts what the loop asks of it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.polls = 0
        self.asked: list[str] = []

    def poll(self) -> list[RunStatus]:
        self.polls += 1
        return super().poll()

    def status(self, request: StatusRequest) -> RunStatus:
        self.asked.append(request.run_id)
        return super().status(request)


def long_jobs(n: int) -> list[JobSpec]:
    return [
        JobSpec.model_validate(
            {
                "name": f"long-{index}",
                "queue": "default",
                "tasks": [{"name": "main", "resources": {"cpu": 1}}],
                "payload": {"sim": {"duration": 600, "sigterm_delay": 0.5}},
            }
        )
        for index in range(n)
    ]


def test_a_pending_cancel_is_settled_by_asking_about_its_run_only(tmp_path: Path) -> None:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    store.put_queue(QueueSpec(name="default"))
    settings: dict[str, Any] = {"grace_period": 10.0}
    backend = CountingSim(
        cluster="sim", nodes=[{"name": "n", "resources": {"cpu": 64}}], **settings
    )
    store.upsert_cluster(cluster_spec_from_inventory("sim", "sim", backend.inventory().nodes))
    loop = SchedulingLoop(store, {"sim": backend}, LoopSettings(replica="fast-path"))
    try:
        ids = store.submit_jobs(long_jobs(20))
        for _ in range(20):
            loop.cycle()
            if all(store.get_job(job).state is JobState.RUNNING for job in ids):
                break
        assert all(store.get_job(job).state is JobState.RUNNING for job in ids)
        victim = ids[7]
        store.cancel(victim, "no longer needed")
        loop.transitions()  # the wake's pass: sees the request, asks the backend to stop it
        assert store.get_job(victim).state in ACTIVE_JOB_STATES
        time.sleep(0.6)  # it exits 0.5 s after SIGTERM: it has ended now
        backend.polls, backend.asked = 0, []
        loop._last_pass = time.monotonic()  # a full pass ran just now: the next is a fast one
        loop._between_pass()
        assert store.get_job(victim).state is JobState.CANCELLED
        assert backend.polls == 0
        assert backend.asked == [store.get_job(victim).run.id]  # type: ignore[union-attr]
        assert all(store.get_job(job).state is JobState.RUNNING for job in ids if job != victim)
    finally:
        loop.close()
        backend.close()
        store.close()
