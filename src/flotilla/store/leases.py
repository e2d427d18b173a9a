"""Leader leases with fencing tokens, in one row per lease name.

Acquire is one atomic upsert (``INSERT … ON CONFLICT DO UPDATE … WHERE free``): on PostgreSQL
the row lock makes concurrent acquirers queue, and the WHERE is evaluated against the row as the
previous winner committed it, so exactly one of them gets an unexpired lease. The token grows on
every acquire (a new term, even under the same holder name) and stays on renewal; fenced writes
check it inside their own transaction (``check_fence``).

A stopped leader must not hold the standby off (issue 23): a leader SIGSTOPped inside a
fenced write keeps the lease row share-locked, and the standby's acquire waited for it until
the leader resumed — past the TTL, indefinitely. So on PostgreSQL every transaction that
locks the lease row bounds how long it may sit idle with the lock
(``idle_in_transaction_session_timeout``, set for that transaction only, to the term's
length): the server ends the session of a holder stopped that long, which rolls its
transaction back (nothing of it commits, so fencing holds: the resumed process finds its
connection gone and, on its next write, a newer term). And the acquire waits for the row at
most ``LOCK_WAIT`` (``lock_timeout``), then answers "not acquired", so a standby's cycle
never hangs on it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from typing import cast as typed

from sqlalchemy import BigInteger, Table, Text, cast, func, literal, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from flotilla.store.errors import LeaseLostError
from flotilla.store.records import Lease
from flotilla.store.schema import LeaseRow

TABLE = typed(Table, LeaseRow.__table__)

LOCK_WAIT = 1.0
"""Longest an acquire waits for the lease row's lock (seconds; at most half the TTL)."""

MIN_IDLE_HOLD = 1.0
"""Shortest a transaction holding the lease row may sit idle before the server ends it."""

LOCK_NOT_AVAILABLE = "55P03"
"""PostgreSQL's SQLSTATE for a lock wait past ``lock_timeout``."""


def _milliseconds(seconds: float) -> str:
    return str(max(1, round(seconds * 1000)))


def bound_lock_hold(session: Session, ttl: float, *, lock_wait: float | None = None) -> None:
    """On PostgreSQL: this transaction, which locks the lease row, may sit idle with it at
    most ``ttl`` (at least ``MIN_IDLE_HOLD``) seconds — a process stopped inside it is cut
    off by the server — and, with ``lock_wait``, waits for the row's lock at most that long.
    Nothing on SQLite (one process's file lock; a stopped writer there holds every writer)."""
    if session.get_bind().dialect.name != "postgresql":
        return
    settings = [
        func.set_config(
            "idle_in_transaction_session_timeout",
            _milliseconds(max(ttl, MIN_IDLE_HOLD)),
            literal(True),
        )
    ]
    if lock_wait is not None:
        settings.append(func.set_config("lock_timeout", _milliseconds(lock_wait), literal(True)))
    session.execute(select(*settings))


def lock_not_available(error: OperationalError) -> bool:
    """Whether ``error`` is a lock wait cut off by ``lock_timeout``."""
    return getattr(error.orig, "sqlstate", None) == LOCK_NOT_AVAILABLE


def acquire(session: Session, name: str, holder: str, ttl: float, now: datetime) -> Lease | None:
    """A new term for ``holder`` if the lease is free (expired, or its own). On PostgreSQL
    it waits for the row's lock at most ``LOCK_WAIT`` and raises ``OperationalError``
    (``lock_not_available``) past it: the caller answers "not acquired"."""
    bound_lock_hold(session, ttl, lock_wait=min(LOCK_WAIT, ttl / 2))
    expires = now + timedelta(seconds=ttl)
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    values = {
        "name": name,
        "holder": holder,
        "expires_at": expires,
        "fencing_token": 1,
        "acquired_at": now,
        "renewed_at": now,
    }
    statement = insert(TABLE).values(values)
    returning = statement.on_conflict_do_update(
        index_elements=[TABLE.c.name],
        set_={
            "holder": holder,
            "expires_at": expires,
            # Every acquire starts a new term, also under the same holder name: a replica
            # restarted with ``--replica NAME`` must fence whatever its previous process
            # (paused, not dead) still believes it holds. Renewal keeps the token.
            "fencing_token": TABLE.c.fencing_token + 1,
            "acquired_at": now,
            "renewed_at": now,
        },
        where=or_(TABLE.c.expires_at <= now, TABLE.c.holder == holder),
    ).returning(TABLE.c.fencing_token)
    token = session.execute(returning).scalar_one_or_none()
    if token is None:
        return None
    return Lease(name=name, holder=holder, token=int(token), expires_at=expires)


def renew(session: Session, lease: Lease, ttl: float, now: datetime) -> Lease | None:
    """Extend ``lease`` while it has not expired; None once it has (or another term began)."""
    return _extend(session, lease, ttl, now, LeaseRow.expires_at > now)


def resume(session: Session, lease: Lease, ttl: float, now: datetime) -> Lease | None:
    """Extend ``lease`` even if it expired, as long as no one took a newer term since: the
    row still names its holder and token (every acquire raises the token). A term that ran
    out while its holder was busy — a round longer than the TTL, the renewing thread kept
    off the CPU — goes on; nothing was written under another term meanwhile, so nothing its
    holder computed is stale for that reason. None once another term began."""
    return _extend(session, lease, ttl, now)


def _extend(
    session: Session, lease: Lease, ttl: float, now: datetime, *conditions: Any
) -> Lease | None:
    """Move the term's expiry to ``now + ttl`` where the row still names its holder and token
    (and ``conditions`` hold); the extended lease, or None."""
    bound_lock_hold(session, ttl)
    expires = now + timedelta(seconds=ttl)
    token = session.execute(
        update(LeaseRow)
        .where(
            LeaseRow.name == lease.name,
            LeaseRow.holder == lease.holder,
            LeaseRow.fencing_token == lease.token,
            *conditions,
        )
        .values(expires_at=expires, renewed_at=now)
        .returning(LeaseRow.fencing_token)
    ).scalar_one_or_none()
    if token is None:
        return None
    return Lease(name=lease.name, holder=lease.holder, token=lease.token, expires_at=expires)


def release(session: Session, lease: Lease, now: datetime) -> None:
    bound_lock_hold(session, (lease.expires_at - now).total_seconds())
    session.execute(
        update(LeaseRow)
        .where(
            LeaseRow.name == lease.name,
            LeaseRow.holder == lease.holder,
            LeaseRow.fencing_token == lease.token,
        )
        .values(expires_at=now, renewed_at=now)
    )


def current(session: Session, name: str, now: datetime) -> Lease | None:
    row = session.get(LeaseRow, name)
    if row is None or row.expires_at <= now:
        return None
    return Lease(
        name=row.name, holder=row.holder, token=row.fencing_token, expires_at=row.expires_at
    )


def check_fence(session: Session, lease: Lease, now: datetime | None) -> None:
    """Raise ``LeaseLostError`` unless ``lease`` is still held. On PostgreSQL the row stays
    share-locked until commit, so no one can take the lease between this check and the write;
    and the transaction may sit idle at most the term's length (``bound_lock_hold``, set in
    the same statement), so a writer stopped inside it cannot keep the lease from the
    standby past that. ``now=None``: the database server's clock, read in the same
    statement."""
    columns: list[Any] = [TABLE.c.holder, TABLE.c.fencing_token, TABLE.c.expires_at]
    if now is None:
        columns.append(func.clock_timestamp().label("now"))
    if session.get_bind().dialect.name == "postgresql":
        term = func.extract("epoch", TABLE.c.expires_at - TABLE.c.renewed_at) * 1000
        hold = func.greatest(func.round(term), MIN_IDLE_HOLD * 1000)
        columns.append(
            func.set_config(
                "idle_in_transaction_session_timeout",
                cast(cast(hold, BigInteger), Text),
                literal(True),
            ).label("hold")
        )
    row = session.execute(
        select(*columns).where(TABLE.c.name == lease.name).with_for_update(read=True)
    ).one_or_none()
    if (
        row is None
        or row.holder != lease.holder
        or row.fencing_token != lease.token
        or row.expires_at <= (row.now if now is None else now)
    ):
        raise LeaseLostError(
            f"lease {lease.name} (token {lease.token}) is no longer held by {lease.holder}"
        )
