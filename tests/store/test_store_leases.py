"""Leader lease: one holder at a time, expiry, hand-over with a new token, fenced writes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from store_support import FakeClock, job

from flotilla.store import JobState, LeaseLostError, SqlStore, make_engine


@pytest.fixture
def other(database_url: str, clock: FakeClock, store: SqlStore) -> Iterator[SqlStore]:
    """A second store instance on the same database: another replica."""
    replica = SqlStore(make_engine(database_url), clock=clock)
    yield replica
    replica.close()


def test_only_one_replica_holds_the_lease(store: SqlStore, other: SqlStore) -> None:
    lease = store.try_acquire_lease("leader", "replica-1", ttl=10)
    assert lease is not None and lease.token == 1
    assert other.try_acquire_lease("leader", "replica-2", ttl=10) is None
    assert other.current_lease("leader") == lease
    again = store.try_acquire_lease("leader", "replica-1", ttl=10)
    assert again is not None and again.token == lease.token


def test_an_expired_lease_changes_hands_with_a_new_token(
    store: SqlStore, other: SqlStore, clock: FakeClock
) -> None:
    old = store.try_acquire_lease("leader", "replica-1", ttl=10)
    assert old is not None
    clock.advance(9)
    renewed = store.renew_lease(old, ttl=10)
    assert renewed is not None and renewed.expires_at > old.expires_at
    clock.advance(10)
    assert other.current_lease("leader") is None
    new = other.try_acquire_lease("leader", "replica-2", ttl=10)
    assert new is not None and new.token == old.token + 1
    assert store.renew_lease(renewed, ttl=10) is None


def test_release_lets_another_replica_take_over_at_once(store: SqlStore, other: SqlStore) -> None:
    lease = store.try_acquire_lease("leader", "replica-1", ttl=60)
    assert lease is not None
    store.release_lease(lease)
    taken = other.try_acquire_lease("leader", "replica-2", ttl=60)
    assert taken is not None and taken.token == lease.token + 1


def test_a_deposed_leader_cannot_write(store: SqlStore, other: SqlStore, clock: FakeClock) -> None:
    [job_id] = store.submit_jobs([job("j")])
    old = store.try_acquire_lease("leader", "replica-1", ttl=10)
    assert old is not None
    run = store.record_run(job_id, "c1", {}, fence=old)
    clock.advance(11)
    with pytest.raises(LeaseLostError):
        store.transition(job_id, JobState.RUNNING, "started", fence=old)
    new = other.try_acquire_lease("leader", "replica-2", ttl=10)
    assert new is not None
    before = store.get_job(job_id)
    with pytest.raises(LeaseLostError):
        store.transition(job_id, JobState.RUNNING, "started", run=run.id, fence=old)
    assert store.get_job(job_id) == before
    assert other.transition(job_id, JobState.RUNNING, "up", fence=new).state is JobState.RUNNING


RACER = """
import sys
from flotilla.store import SqlStore, make_engine
store = SqlStore(make_engine(sys.argv[1]))
sys.stdin.readline()
lease = store.try_acquire_lease("leader", sys.argv[2], ttl=600)
print("won" if lease is not None else "lost", flush=True)
"""


def test_racing_processes_on_postgresql_elect_exactly_one_leader(postgres_url: str) -> None:
    SqlStore.open(postgres_url).close()
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, postgres_url, f"replica-{index}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for index in range(2)
    ]
    for racer in racers:
        assert racer.stdin is not None
        racer.stdin.write("go\n")
        racer.stdin.flush()
    outcomes = [racer.communicate(timeout=60)[0].strip() for racer in racers]
    assert sorted(outcomes) == ["lost", "won"]
