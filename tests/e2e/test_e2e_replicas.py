"""Two ``flotilla up`` replicas on one PostgreSQL database: one leads, both accept jobs; kill
the leader with ``kill -9`` and the other takes over and finishes the work, dispatching
nothing twice.

Both share the state dir, as replicas on one machine share the local cluster, so the new
leader adopts the runs the old one started.

Leadership is watched the whole time, not sampled once: every replica's report and the lease
row itself, every 50 ms. The takeover is timed on the database's clock, the one the lease
expires by: the follower takes the lease after the dead leader's last renewal has expired, and
within one of its own cycles after that.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
from sqlalchemy import Engine, select

from flotilla.store import make_engine
from flotilla.store.schema import LeaseRow
from tests.e2e.service import Server, Services, assert_started_once, job_spec, wait_for
from tests.postgres_support import postgres_schema_url

LEASE_TTL = 3.0
"""``flotilla up --lease-ttl``: how long a dead leader's lease blocks the other replica."""
CYCLE = 0.2
"""``flotilla up --cycle-interval``."""
CYCLE_ALLOWANCE = 2.0
"""How long one follower cycle may take end to end on a loaded, shared 2-core runner: the
interval, a cycle's work, a slow database round trip. Not a speed claim, a bound on 'one
cycle' that the lease's TTL (the behaviour under test) dominates."""


@dataclass(frozen=True)
class LeaseRowState:
    holder: str
    token: int
    acquired_at: datetime
    expires_at: datetime


def lease_row(engine: Engine) -> LeaseRowState | None:
    with engine.connect() as connection:
        row = connection.execute(
            select(
                LeaseRow.holder, LeaseRow.fencing_token, LeaseRow.acquired_at, LeaseRow.expires_at
            ).where(LeaseRow.name == "scheduler")
        ).one_or_none()
    if row is None:
        return None
    return LeaseRowState(row.holder, row.fencing_token, row.acquired_at, row.expires_at)


def _leader(server: Server) -> bool:
    try:
        scheduler = server.report()["scheduler"]
    except (httpx.TransportError, AssertionError):
        return False  # a dead replica leads nothing
    return bool(scheduler and scheduler["leader"])


@dataclass
class LeadershipWatch:
    """Samples who leads, by every replica's own account and by the lease row, until stopped."""

    replicas: list[Server]
    engine: Engine
    samples: list[tuple[float, list[int], LeaseRowState | None]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            leaders = [index for index, server in enumerate(self.replicas) if _leader(server)]
            self.samples.append((time.monotonic(), leaders, lease_row(self.engine)))
            self.stop.wait(0.05)

    def between(
        self, start: float, end: float
    ) -> list[tuple[float, list[int], LeaseRowState | None]]:
        return [sample for sample in self.samples if start <= sample[0] <= end]


def test_one_leader_then_failover_without_double_dispatch(
    services: Services, postgres_admin: tuple[Engine, str], tmp_path: Path
) -> None:
    db = postgres_schema_url(postgres_admin)
    state_dir, marks = tmp_path / "runs", tmp_path / "marks"
    names = ("replica-a", "replica-b")
    replicas = [
        services.start(
            db=db,
            state_dir=state_dir,
            workdir=tmp_path / name,
            extra=[
                *("--cycle-interval", str(CYCLE)),
                *("--lease-ttl", str(LEASE_TTL)),
                *("--replica", name),
            ],
        )
        for name in names
    ]
    engine = make_engine(db)
    watch = LeadershipWatch(replicas, engine)
    watcher = threading.Thread(target=watch.run, daemon=True)
    watcher.start()
    try:
        wait_for(lambda: any(_leader(server) for server in replicas), 30, "a leader")
        led_from = time.monotonic()
        [leader] = [server for server in replicas if _leader(server)]
        [follower] = [server for server in replicas if server is not leader]

        command = f'echo "$FLOTILLA_JOB_NAME" >> {marks}; sleep 0.5'
        first = leader.submit(*(job_spec(f"a-{i}", command, cpu=0.5) for i in range(4)))
        second = follower.submit(*(job_spec(f"b-{i}", command, cpu=0.5) for i in range(4)))
        ids = first + second
        wait_for(lambda: marks.exists() and len(marks.read_text().split()) >= 2, 60, "jobs")
        # Watch one whole lease life (several renewals) with both replicas alive.
        wait_for(lambda: time.monotonic() - led_from > LEASE_TTL * 1.5, 30, "a lease life")

        leader.kill9()
        killed_at = time.monotonic()
        dead_term = lease_row(engine)
        assert dead_term is not None and dead_term.holder == names[replicas.index(leader)]
        wait_for(lambda: _leader(follower), LEASE_TTL + 30, "the follower to take the lease")
        took_over = time.monotonic() - killed_at
        new_term = lease_row(engine)
        time.sleep(LEASE_TTL)  # and the follower keeps it: no flapping after the takeover
    finally:
        watch.stop.set()
        watcher.join()

    # Never two leaders, by the replicas' own account, over the whole test.
    assert all(len(leaders) <= 1 for _, leaders, _ in watch.samples), watch.samples
    # While both lived, one term only: the lease never changed hands or tokens.
    alive = watch.between(led_from, killed_at)
    assert len(alive) > 10, "the watch must cover the lease's life"
    terms = {(row.holder, row.token) for _, _, row in alive if row is not None}
    assert terms == {(dead_term.holder, dead_term.token)}, terms
    assert all(leaders == [replicas.index(leader)] for _, leaders, _ in alive[1:-1])

    # The takeover: a new term, after the dead leader's lease expired, within one cycle.
    assert new_term is not None and new_term.holder == names[replicas.index(follower)]
    assert new_term.token == dead_term.token + 1
    late = (new_term.acquired_at - dead_term.expires_at).total_seconds()
    assert late >= 0, f"the follower took the lease {-late:.2f}s before it expired"
    assert late <= CYCLE + CYCLE_ALLOWANCE, f"takeover {late:.2f}s after expiry: not one cycle"
    after = watch.between(killed_at + took_over, time.monotonic())
    assert {(row.holder, row.token) for _, _, row in after if row is not None} == {
        (new_term.holder, new_term.token)
    }

    assert follower.wait_states(ids, limit=60) == dict.fromkeys(ids, "succeeded")
    expected = [f"a-{i}" for i in range(4)] + [f"b-{i}" for i in range(4)]
    assert collections.Counter(marks.read_text().split()) == collections.Counter(expected)
    for job_id in ids:
        assert_started_once(follower, job_id)
    engine.dispose()
    print(f"takeover {late:.2f}s after the lease expired ({took_over:.1f}s after kill -9)")
