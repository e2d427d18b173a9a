"""A new term asks the backends about the runs the last leader dispatched; a run another
process holds (``RunBusy``: the local backend's run lock of a stopped leader) is skipped for
that cycle, and the others are still asked about (issue 23: one such run held back every run
behind it, cycle after cycle, while its lock was held)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from flotilla.backends import RunBusy, RunStatus, StatusRequest
from flotilla.backends.sim import FakeClock, SimBackend
from flotilla.model import JobSpec, QueueSpec
from flotilla.service.records import cluster_spec_from_inventory
from flotilla.store import JobState, SqlStore
from tests.service_builders import loop_over
from tests.timing import wait_until

WAIT = 10.0
"""How long the test waits for something before failing (not a performance bound)."""


def job(name: str) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": name,
            "queue": "default",
            "tasks": [{"name": "main", "resources": {"cpu": 1}}],
            "payload": {"sim": {"duration": 60}},
        }
    )


def test_a_new_term_reports_the_runs_it_can_while_one_is_held_by_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    store.put_queue(QueueSpec(name="default"))
    clock = FakeClock()
    backend = SimBackend(cluster="sim", nodes=[{"name": "n", "resources": {"cpu": 8}}], clock=clock)
    store.upsert_cluster(cluster_spec_from_inventory("sim", "sim", backend.inventory().nodes))
    ids = store.submit_jobs([job(f"job-{index}") for index in range(3)])
    leader = loop_over(store, {"sim": backend}, register=False, replica="leader")
    cycle_until(leader.cycle, lambda: all(running(store, job_id) for job_id in ids))
    leader.close()  # its term ends; the runs go on, and end while no replica watches
    clock.advance(120)
    backend.poll()  # what it had to report went to the old leader, which is gone

    refused: list[str] = []
    asked = backend.status

    def held_elsewhere(request: StatusRequest) -> RunStatus:
        if not refused or request.run_id == refused[0]:  # the first one asked about
            refused.append(request.run_id)
            raise RunBusy(f"run {request.run_id} is being started or adopted by another process")
        return asked(request)

    monkeypatch.setattr(backend, "status", held_elsewhere)
    standby = loop_over(store, {"sim": backend}, register=False, replica="standby")
    try:
        standby.cycle()  # its first: it takes the lease and asks about every run
        assert standby.lease is not None
        held = next(job_id for job_id in ids if store.get_job(job_id).run.id == refused[0])  # type: ignore[union-attr]
        states = {job_id: store.get_job(job_id).state for job_id in ids}
        assert states.pop(held) is JobState.RUNNING  # asked again next cycle
        assert set(states.values()) == {JobState.SUCCEEDED}  # not held back behind it

        monkeypatch.setattr(backend, "status", asked)  # its lock given back
        cycle_until(standby.cycle, lambda: store.get_job(held).state is JobState.SUCCEEDED)
    finally:
        standby.close()
        backend.close()
        store.close()


def running(store: SqlStore, job_id: str) -> bool:
    return store.get_job(job_id).state is JobState.RUNNING


def cycle_until(cycle: Callable[[], object], done: Callable[[], bool]) -> None:
    wait_until(done, "the loop to get there", WAIT, interval=0.01, step=cycle)
