"""A remote engine keeps its runs whatever happens to the scheduler: a new leader's fresh
backend objects adopt them, a run the engine never had is lost and re-queued, an engine that
cannot be asked is asked again later, and a cluster that stops answering is unreachable."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flotilla.store import JobState
from tests.fleet.support import FakeEngine, FleetService, factory_with, fleet_data, job, sqlite_url

REMOTE = {"name": "remote", "backend": "fake-remote"}


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def db(tmp_path: Path) -> str:
    return sqlite_url(tmp_path)


def replica(db: str, engine: FakeEngine, name: str, **kwargs: float) -> FleetService:
    return FleetService(db, replica=name, factory=factory_with(engine), **kwargs)


@pytest.fixture
def leader(db: str, engine: FakeEngine) -> Iterator[FleetService]:
    first = replica(db, engine, "replica-a")
    first.apply(fleet_data(REMOTE))
    first.start()
    yield first
    first.close()


def take_over(db: str, engine: FakeEngine, old: FleetService) -> FleetService:
    """The old leader dies without a word (its lease simply stops being renewed); a new
    replica with fresh backend objects takes the lease."""
    new = replica(db, engine, "replica-b")
    new.start()
    assert old.loop is not None and old.loop.lease is not None
    old.store.release_lease(old.loop.lease)  # as if its ttl ran out
    new.cycles(1)
    assert new.loop is not None and new.loop.is_leader
    return new


def test_a_new_leader_adopts_the_runs_of_the_old_one_and_runs_nothing_twice(
    db: str, engine: FakeEngine, leader: FleetService
) -> None:
    ids = leader.submit(job("a"), job("b"))
    leader.cycles()
    assert [leader.state(i) for i in ids] == [JobState.RUNNING] * 2
    new = take_over(db, engine, leader)
    try:
        run_a = new.store.get_job(ids[0]).run
        assert run_a is not None
        engine.finish(run_a.id, exit_code=0)
        new.cycles(3)
        assert new.state(ids[0]) is JobState.SUCCEEDED
        assert new.state(ids[1]) is JobState.RUNNING
        assert set(engine.dispatches.values()) == {1}
        assert len(engine.dispatches) == 2
    finally:
        new.close()


def test_a_run_the_engine_does_not_know_is_lost_and_its_job_requeued(
    db: str, engine: FakeEngine, leader: FleetService
) -> None:
    [a] = leader.submit(job("a"))
    leader.cycles()
    run = leader.store.get_job(a).run
    assert run is not None and leader.state(a) is JobState.RUNNING
    del engine.runs[run.id]  # e.g. the engine's state was wiped
    new = take_over(db, engine, leader)
    try:
        events = new.store.events(a)
        assert any(
            "run lost" in event.reason and "has no record" in event.reason for event in events
        )
        new.cycles(2)
        again = new.store.get_job(a).run
        assert again is not None and again.id != run.id  # dispatched anew
        assert new.state(a) is JobState.RUNNING
    finally:
        new.close()


def test_an_engine_that_cannot_be_asked_is_asked_again_not_declared_lost(
    db: str, engine: FakeEngine, leader: FleetService
) -> None:
    [a] = leader.submit(job("a"))
    leader.cycles()
    engine.up = False
    new = take_over(db, engine, leader)
    try:
        new.cycles(2)
        assert new.state(a) is JobState.RUNNING  # not lost: the engine may still run it
        engine.up = True
        run = new.store.get_job(a).run
        assert run is not None
        engine.finish(run.id, exit_code=3)
        new.cycles(2)
        assert new.state(a) is JobState.FAILED
        assert new.store.runs(a)[-1].exit_code == 3
    finally:
        new.close()


def test_a_silent_cluster_becomes_unreachable_and_its_orphaned_runs_are_stopped(
    db: str, engine: FakeEngine
) -> None:
    service = replica(db, engine, "replica-a", heartbeat_timeout=0.3)
    try:
        service.apply(fleet_data(REMOTE))
        service.start()
        [a] = service.submit(job("a"))
        service.cycles()
        first = service.store.get_job(a).run
        assert first is not None and service.state(a) is JobState.RUNNING
        engine.up = False
        time.sleep(0.4)
        service.cycles(1)
        assert service.store.get_cluster("remote").state == "unreachable"
        assert service.state(a) is JobState.QUEUED  # re-queued, as docs/backends.md says
        engine.up = True
        service.cycles(3)
        # Back again: the job runs once more, and the old run — still active in the
        # engine — is stopped rather than left to run twice.
        assert service.store.get_cluster("remote").state == "ready"
        assert engine.runs[first.id].state.value == "cancelled"
        assert service.state(a) is JobState.RUNNING
    finally:
        service.close()


def test_an_engine_down_at_start_is_one_line_and_the_cluster_unreachable(
    db: str, engine: FakeEngine
) -> None:
    engine.up = False
    service = replica(db, engine, "replica-a")
    try:
        service.apply(fleet_data(REMOTE))
        service.start()
        assert service.notices[0].startswith("fleet 'test' (version 1, applied ")
        assert service.notices[1] == (
            "cluster remote (fake-remote): unreachable, asked again with backoff: "
            "fake engine at fake://engine does not answer"
        )
        assert service.store.get_cluster("remote").state == "unreachable"
        engine.up = True
        service.cycles(1)
        assert service.store.get_cluster("remote").state == "ready"
        assert service.store.list_nodes("remote")[0].name == "remote-0"
    finally:
        service.close()


def test_a_cluster_whose_engine_reports_no_nodes_yet_is_scheduled_around(db: str) -> None:
    empty = FakeEngine(nodes=())
    service = replica(db, empty, "replica-a")
    try:
        # c1 takes every job though it is simulated beside a real cluster: its file says so.
        c1 = {"name": "c1", "backend": "sim", "labels": {"flotilla.io/simulated": "false"}}
        service.apply(fleet_data(REMOTE, c1))
        service.start()
        [a] = service.submit(job("a"))
        service.cycles(3)
        assert service.cluster_of(a) == "c1"
        assert service.store.get_cluster("remote").state == "ready"
        assert service.store.list_nodes("remote") == []
    finally:
        service.close()
