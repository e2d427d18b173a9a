"""Resuming a term: a lease that ran out goes on while no one took a newer term (issue 23,
item 6). A round longer than the TTL must be discarded only when another replica actually
holds a newer term, never merely because its holder was slow to renew."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from store_support import FakeClock, job

from flotilla.store import CycleWrite, RunRequest, SqlStore, make_engine


@pytest.fixture
def other(database_url: str, clock: FakeClock, store: SqlStore) -> Iterator[SqlStore]:
    """A second store instance on the same database: another replica."""
    replica = SqlStore(make_engine(database_url), clock=clock)
    yield replica
    replica.close()


def test_an_expired_term_nobody_took_resumes_with_its_token_and_can_write_again(
    store: SqlStore, other: SqlStore, clock: FakeClock
) -> None:
    [job_id] = store.submit_jobs([job("a")])
    lease = store.try_acquire_lease("leader", "replica-1", ttl=2)
    assert lease is not None
    clock.advance(5)  # a round of 5 s with nobody renewing
    assert store.renew_lease(lease, ttl=2) is None  # renewal keeps its meaning: expired
    resumed = store.resume_lease(lease, ttl=2)
    assert resumed is not None and resumed.token == lease.token
    assert other.current_lease("leader") == resumed  # held again: no one else may take it
    assert other.try_acquire_lease("leader", "replica-2", ttl=2) is None
    write = CycleWrite(runs=[RunRequest(job_id=job_id, cluster="c", assignment={})])
    store.commit_cycle(write, since=0, fence=resumed)  # the slow round's leases commit
    assert store.get_job(job_id).state.value == "leased"


def test_a_term_another_replica_took_over_never_resumes(
    store: SqlStore, other: SqlStore, clock: FakeClock
) -> None:
    lease = store.try_acquire_lease("leader", "replica-1", ttl=2)
    assert lease is not None
    clock.advance(5)
    newer = other.try_acquire_lease("leader", "replica-2", ttl=60)
    assert newer is not None and newer.token == lease.token + 1
    assert store.resume_lease(lease, ttl=2) is None
    assert other.current_lease("leader") == newer
    clock.advance(120)  # the newer term ran out too: the old one still never comes back
    assert store.resume_lease(lease, ttl=2) is None


def test_a_restart_under_the_same_name_is_a_newer_term_the_old_process_cannot_resume(
    store: SqlStore, other: SqlStore
) -> None:
    old = store.try_acquire_lease("leader", "replica-1", ttl=10)
    new = other.try_acquire_lease("leader", "replica-1", ttl=10)
    assert old is not None and new is not None
    assert store.resume_lease(old, ttl=10) is None
    assert other.current_lease("leader") == new
