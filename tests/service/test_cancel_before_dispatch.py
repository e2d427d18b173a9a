"""A cancel recorded while a job is leased, before its run was handed to the backend, is
honoured: the run is never dispatched, the job ends ``cancelled`` without ever running.

Seen as a user: ``queued→leased, cancel_requested, leased→pending, pending→running,
running→cancelled`` — the process ran after the cancel was recorded, because the dispatch
batch it was part of had been read before the cancel committed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from flotilla.backends.interface import DispatchRequest, DispatchResult
from flotilla.backends.sim import SimBackend
from flotilla.model import JobSpec
from flotilla.service.loop import SchedulingLoop
from flotilla.store import JobState, SqlStore
from tests.service_builders import loop_over
from tests.timing import wait_until


class HookedSim(SimBackend):
    """A sim backend that runs ``on_dispatch`` before it takes each run."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.on_dispatch: Callable[[DispatchRequest], None] = lambda request: None
        self.dispatched: list[str] = []

    def dispatch(self, request: DispatchRequest) -> DispatchResult:
        self.on_dispatch(request)
        self.dispatched.append(request.job)
        return super().dispatch(request)


def two_jobs(tmp_path: Path) -> tuple[SqlStore, HookedSim, SchedulingLoop, list[str]]:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    backend = HookedSim(cluster="sim", nodes=[{"name": "n", "resources": {"cpu": 8}}])
    loop = loop_over(store, {"sim": backend}, replica="cancel-leased")
    specs = [
        JobSpec.model_validate(
            {
                "name": f"job-{index}",
                "queue": "default",
                "tasks": [{"name": "main", "resources": {"cpu": 1}}],
                "payload": {"sim": {"duration": 600}},
            }
        )
        for index in range(2)
    ]
    return store, backend, loop, store.submit_jobs(specs)


def settle(loop: SchedulingLoop, store: SqlStore, job: str) -> None:
    wait_until(
        lambda: store.get_job(job).state is JobState.CANCELLED,
        lambda: f"the job to be cancelled: {store.get_job(job).state}",
        60,
        0,
        loop.cycle,
    )


@pytest.mark.parametrize("handed_over", [True, False], ids=["same-process", "other-process"])
def test_a_job_cancelled_while_leased_in_a_dispatch_batch_never_starts(
    tmp_path: Path, handed_over: bool
) -> None:
    """The first job's dispatch is slow; meanwhile the second, leased in the same batch, is
    cancelled — by this process's API (handed over to the loop) or by another process's
    (only the store knows). Its run must not be dispatched."""
    store, backend, loop, (first, second) = two_jobs(tmp_path)

    def cancel_the_other(request: DispatchRequest) -> None:
        if request.job != first:
            return
        record = store.cancel(second, "no longer needed")
        assert record.state is JobState.LEASED  # leased with the first, not dispatched yet
        if handed_over:
            loop.cancelled([record])
        else:
            time.sleep(0.2)  # a slow engine: the batch reads the store again

    backend.on_dispatch = cancel_the_other
    try:
        settle(loop, store, second)
        assert second not in backend.dispatched
        states = [event.to_state for event in store.events(second) if event.to_state is not None]
        assert JobState.PENDING not in states and JobState.RUNNING not in states
        assert first in backend.dispatched  # the job not cancelled was not held back
    finally:
        loop.close()
        store.close()
