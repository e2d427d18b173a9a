"""While a cancel is pending, the loop asks only about the runs being cancelled; a cancel the
API in the same process hands over is stopped before the change feed is read."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from flotilla.backends.interface import (
    BackendRunState,
    CancelRequest,
    CancelResult,
    RunStatus,
    StatusRequest,
)
from flotilla.backends.sim import FakeClock, SimBackend
from flotilla.model import JobSpec, QueueSpec
from flotilla.service.loop import SchedulingLoop
from flotilla.store import (
    ACTIVE_JOB_STATES,
    CycleCommit,
    CycleWrite,
    JobState,
    SqlStore,
)
from tests.service_builders import loop_over


class CountingSim(SimBackend):
    """A sim backend that counts what the loop asks of it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.polls = 0
        self.asked: list[str] = []
        self.order: list[str] = []
        """What the loop did, in order, with the store's reads (see the test below)."""

    def poll(self) -> list[RunStatus]:
        self.polls += 1
        return super().poll()

    def status(self, request: StatusRequest) -> RunStatus:
        self.asked.append(request.run_id)
        return super().status(request)

    def cancel(self, request: CancelRequest) -> CancelResult:
        self.order.append(f"stop {request.run_id}")
        return super().cancel(request)


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


def running_jobs(
    tmp_path: Path,
    count: int,
    backend_type: type[CountingSim] = CountingSim,
    clock: FakeClock | None = None,
) -> tuple[SqlStore, CountingSim, SchedulingLoop, list[str]]:
    """A store, a sim backend (on ``clock``, else the wall clock) and a leading loop with
    ``count`` long jobs running."""
    store = SqlStore.open(f"sqlite:///{tmp_path / 'flotilla.db'}")
    store.put_queue(QueueSpec(name="default"))
    settings: dict[str, Any] = {"grace_period": 10.0}
    if clock is not None:
        settings["clock"] = clock
    backend = backend_type(
        cluster="sim", nodes=[{"name": "n", "resources": {"cpu": 64}}], **settings
    )
    loop = loop_over(store, {"sim": backend}, replica="fast-path")
    ids = store.submit_jobs(long_jobs(count))
    for _ in range(20):
        loop.cycle()
        if all(store.get_job(job).state is JobState.RUNNING for job in ids):
            break
    assert all(store.get_job(job).state is JobState.RUNNING for job in ids)
    return store, backend, loop, ids


def test_a_pending_cancel_is_settled_by_asking_about_its_run_only(tmp_path: Path) -> None:
    store, backend, loop, ids = running_jobs(tmp_path, 20)
    try:
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


def test_a_cancel_handed_over_by_the_api_is_stopped_before_the_change_feed_is_read(
    tmp_path: Path,
) -> None:
    """``flotilla up`` runs the API and the loop in one process: the API's thread stops the
    run of the job it just cancelled itself and hands the job to the loop, whose next pass
    neither reads the change feed first nor stops the run again: it follows the run with
    status requests only, and records its end by one write (a round trip that on a loaded
    PostgreSQL took tens of milliseconds each)."""
    store, backend, loop, ids = running_jobs(tmp_path, 3)
    try:
        read = store.commit_cycle

        def reading(write: CycleWrite, **options: Any) -> CycleCommit:
            backend.order.append("read the store")
            return read(write, **options)

        store.commit_cycle = reading  # type: ignore[method-assign]
        victim = store.cancel(ids[1], "no longer needed")
        assert victim.run is not None
        loop.cancelled([victim])
        assert backend.order == [f"stop {victim.run.id}"]  # on the API's thread, at once
        loop.transitions()  # the wake's pass
        assert backend.order == [f"stop {victim.run.id}"]
        time.sleep(0.6)  # it exits 0.5 s after SIGTERM
        loop._last_pass = time.monotonic()  # a full pass ran just now: the next is a fast one
        loop._between_pass()
        assert store.get_job(victim.id).state is JobState.CANCELLED
        assert backend.order == [f"stop {victim.run.id}", "read the store"]  # one write
        loop.transitions()  # the feed brings the request too: the run is not stopped again
        assert backend.order.count(f"stop {victim.run.id}") == 1
        assert all(store.get_job(job).state is JobState.RUNNING for job in ids if job != victim.id)
    finally:
        loop.close()
        backend.close()
        store.close()


class FailingOnStop(CountingSim):
    """Reports a stopped run ``failed`` (as some engines report a SIGTERMed job)."""

    def status(self, request: StatusRequest) -> RunStatus:
        status = super().status(request)
        if status.state is BackendRunState.CANCELLED:
            return replace(status, state=BackendRunState.FAILED, exit_code=-15)
        return status


def test_a_handed_over_cancel_ends_cancelled_although_the_backend_reports_failed(
    tmp_path: Path,
) -> None:
    """The loop stops a handed-over job's run before its JobDb has the cancel request; a run
    that then ends ``failed`` still ends the job cancelled (not failed, not retried)."""
    store, backend, loop, ids = running_jobs(tmp_path, 2, FailingOnStop)
    try:
        victim = store.cancel(ids[0], "no longer needed")
        loop.cancelled([victim])
        loop.transitions()
        time.sleep(0.6)
        loop._last_pass = time.monotonic()
        loop._between_pass()
        done = store.get_job(victim.id)
        assert done.state is JobState.CANCELLED
        assert store.get_job(ids[1]).state is JobState.RUNNING
    finally:
        loop.close()
        backend.close()
        store.close()


def test_a_standby_replica_hands_the_cancel_over_without_stopping_anything(
    tmp_path: Path,
) -> None:
    """Only the leader's backends stop runs: a replica without the lease whose API took the
    cancel leaves the run alone (its loop, should it lead, stops it then)."""
    store, backend, loop, ids = running_jobs(tmp_path, 2)
    try:
        victim = store.cancel(ids[0], "no longer needed")
        loop._context.lease = None  # this replica lost the lease
        loop.cancelled([victim])
        assert backend.order == []
        assert store.get_job(victim.id).state in ACTIVE_JOB_STATES
    finally:
        loop.close()
        backend.close()
        store.close()


def test_a_run_that_succeeded_before_its_cancel_stays_succeeded_and_is_not_followed(
    tmp_path: Path,
) -> None:
    """A cancel that races the run's own end: the backend says the run had finished; the
    job keeps the run's outcome, and the loop stops asking about it once it has recorded it
    (it polled it every few milliseconds forever before)."""
    clock = FakeClock()
    store, backend, loop, ids = running_jobs(tmp_path, 2, clock=clock)
    try:
        victim = store.get_job(ids[0])
        assert victim.run is not None
        clock.advance(601)  # the sim run reaches its 600 s duration: exited 0
        requested = store.cancel(victim.id, "too late")
        loop.cancelled([requested])
        loop.transitions()
        assert loop._transitions.cancelling
        loop._last_pass = time.monotonic()
        loop._between_pass()
        assert store.get_job(victim.id).state is JobState.SUCCEEDED
        assert not loop._transitions.cancelling
    finally:
        loop.close()
        backend.close()
        store.close()
