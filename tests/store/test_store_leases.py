"""Leader lease: one holder at a time, expiry, hand-over with a new token, fenced writes."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta

import pytest
from store_support import FakeClock, job
from tests.timing import deadline, limit

from flotilla.store import (
    CycleWrite,
    JobState,
    Lease,
    LeaseLostError,
    RunRequest,
    SqlStore,
    Transition,
    make_engine,
)


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
    renewed = store.renew_lease(lease, ttl=10)
    assert renewed is not None and renewed.token == lease.token


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


def test_a_restart_under_the_same_holder_name_fences_the_old_process(
    store: SqlStore, other: SqlStore
) -> None:
    """``flotilla up --replica NAME`` restarted while its previous process is only paused: the
    new process takes the lease back at once, in a new term, and the old one can neither renew
    nor write with what it holds."""
    [job_id] = store.submit_jobs([job("j")])
    stale = store.try_acquire_lease("leader", "replica-1", ttl=60)
    assert stale is not None
    fresh = other.try_acquire_lease("leader", "replica-1", ttl=60)
    assert fresh is not None and fresh.token > stale.token
    assert store.renew_lease(stale, ttl=60) is None
    with pytest.raises(LeaseLostError):
        store.record_run(job_id, "c1", {}, fence=stale)
    assert store.get_job(job_id).state is JobState.QUEUED and store.runs(job_id) == []
    assert other.record_run(job_id, "c1", {}, fence=fresh).state.value == "leased"
    assert other.current_lease("leader") == fresh


FencedWrite = Callable[[SqlStore, str, Lease], object]

FENCED_WRITES: dict[str, FencedWrite] = {
    "record_run": lambda store, job_id, fence: store.record_run(job_id, "c1", {}, fence=fence),
    "record_runs": lambda store, job_id, fence: store.record_runs(
        [RunRequest(job_id, "c1")], fence=fence
    ),
    "transition": lambda store, job_id, fence: store.transition(
        job_id, JobState.CANCELLED, "x", fence=fence
    ),
    "transition_many": lambda store, job_id, fence: store.transition_many(
        [Transition(job_id, JobState.CANCELLED, "x")], fence=fence
    ),
    "commit_cycle": lambda store, job_id, fence: store.commit_cycle(
        CycleWrite(runs=[RunRequest(job_id, "c1")]), since=0, fence=fence
    ),
}


@pytest.mark.parametrize("write", sorted(FENCED_WRITES))
def test_a_write_with_an_old_fencing_token_is_refused_and_writes_nothing(
    store: SqlStore, clock: FakeClock, write: str
) -> None:
    """The fence compares the token itself, not only the holder and the expiry: a lease from
    an earlier term under the same name, unexpired, is refused by every fenced write."""
    [job_id] = store.submit_jobs([job("j")])
    first = store.try_acquire_lease("leader", "replica-1", ttl=60)
    assert first is not None
    store.release_lease(first)
    current = store.try_acquire_lease("leader", "replica-1", ttl=60)
    assert current is not None and current.token == first.token + 1
    old_term = replace(current, token=first.token)
    wrong_holder = replace(current, holder="replica-2")
    before = (store.get_job(job_id), store.events(job_id), store.latest_serial())
    for fence in (old_term, wrong_holder):
        with pytest.raises(LeaseLostError):
            FENCED_WRITES[write](store, job_id, fence)
        assert (store.get_job(job_id), store.events(job_id), store.latest_serial()) == before
    clock.advance(61)
    with pytest.raises(LeaseLostError):
        FENCED_WRITES[write](store, job_id, current)
    assert (store.get_job(job_id), store.events(job_id), store.latest_serial()) == before
    renewed = store.try_acquire_lease("leader", "replica-1", ttl=60)
    assert renewed is not None
    FENCED_WRITES[write](store, job_id, renewed)
    assert store.latest_serial() > before[2]


def test_renewal_keeps_the_token_and_needs_the_current_one(
    store: SqlStore, clock: FakeClock
) -> None:
    lease = store.try_acquire_lease("leader", "replica-1", ttl=10)
    assert lease is not None
    assert store.renew_lease(replace(lease, token=lease.token + 1), ttl=10) is None
    assert store.renew_lease(replace(lease, holder="replica-2"), ttl=10) is None
    clock.advance(5)
    renewed = store.renew_lease(lease, ttl=10)
    assert renewed is not None and renewed.token == lease.token
    assert renewed.expires_at > lease.expires_at


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
    outcomes = [racer.communicate(timeout=limit(60))[0].strip() for racer in racers]
    assert sorted(outcomes) == ["lost", "won"]


def test_renewal_extends_the_stored_lease_of_that_name_only_and_never_revives_an_expired_one(
    store: SqlStore, other: SqlStore, clock: FakeClock
) -> None:
    """What another replica sees is the stored lease: a renewal must move its expiry (or the
    standby takes over from a live leader), touch no other lease, and fail from the moment
    the lease has expired, even if nobody took it yet."""
    lease = store.try_acquire_lease("leader", "replica-1", ttl=10)
    unrelated = store.try_acquire_lease("other-lease", "replica-1", ttl=10)
    assert lease is not None and unrelated is not None
    clock.advance(5)
    renewed = store.renew_lease(lease, ttl=10)
    assert renewed == replace(lease, expires_at=clock.now + timedelta(seconds=10))
    assert renewed is not None and renewed.expires_at > lease.expires_at
    assert other.current_lease("leader") == renewed
    assert other.current_lease("other-lease") == unrelated
    clock.advance(6)  # past the first expiry, inside the renewed one
    assert other.try_acquire_lease("leader", "replica-2", ttl=10) is None
    clock.now = renewed.expires_at  # expired exactly now: lost, even though nobody took it
    assert store.renew_lease(renewed, ttl=10) is None
    assert other.current_lease("leader") is None


STOPPED_IN_A_FENCED_WRITE = """
import sys
from flotilla.model import QueueSpec
from flotilla.store import SqlStore, catalog, make_engine
store = SqlStore(make_engine(sys.argv[1]))
lease = store.try_acquire_lease("leader", "old", ttl=float(sys.argv[2]))
assert lease is not None
try:
    with store._write() as session:  # a fenced write, as every write of the leader is
        store._fence(session, lease)
        print(lease.token, flush=True)  # the test stops this process here
        sys.stdin.readline()  # (resumed) go on with the write
        catalog.put_queue(session, QueueSpec(name="old-term"), store._now())
    print("committed", flush=True)
except Exception as error:
    print("refused:", type(error).__name__, flush=True)
"""


def test_a_leader_stopped_inside_a_fenced_write_does_not_keep_the_standby_out(
    postgres_url: str,
) -> None:
    """Issue 23: a leader SIGSTOPped inside a fenced write kept the lease row share-locked,
    and the standby's acquire waited for it until the leader resumed (past the TTL,
    indefinitely). Now the server ends the stopped transaction after the term's length, the
    standby takes the lease with a newer token, and the resumed leader's write commits
    nothing."""
    ttl = 1.0
    standby = SqlStore.open(postgres_url)
    leader = subprocess.Popen(
        [sys.executable, "-c", STOPPED_IN_A_FENCED_WRITE, postgres_url, str(ttl)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert leader.stdin is not None and leader.stdout is not None
    taken: list[Lease | None] = []
    try:
        old_token = int(leader.stdout.readline())
        leader.send_signal(signal.SIGSTOP)

        def take_over() -> None:
            due = deadline(60)
            while not due.expired():
                lease = standby.try_acquire_lease("leader", "standby", ttl=60)
                if lease is not None:
                    taken.append(lease)
                    return
                time.sleep(0.05)  # the next cycle's try

        trying = threading.Thread(target=take_over, daemon=True)
        trying.start()
        trying.join(timeout=limit(90))
        assert taken, "the standby did not take the lease while the leader was stopped"
        assert taken[0].token == old_token + 1
    finally:
        leader.send_signal(signal.SIGCONT)
        leader.stdin.write("go\n")
        leader.stdin.flush()
        outcome = leader.communicate(timeout=limit(60))[0].strip()
        standby.close()
    assert outcome.startswith("refused:"), outcome
    check = SqlStore.open(postgres_url)
    try:
        assert "old-term" not in {queue.name for queue in check.list_queues()}
        assert check.current_lease("leader") == taken[0]
    finally:
        check.close()
