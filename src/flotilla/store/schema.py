"""The tables, as typed SQLAlchemy 2 ORM classes. The Alembic migrations must agree with these
(a test compares them), so a change here needs a new revision in ``migrations/versions``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAME = 253
"""Longest name the model accepts (a DNS subdomain)."""

ID = 36

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
"""Explicit constraint names, so migrations can refer to them on every database."""


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every database (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use UTC-aware datetimes")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


Big = BigInteger().with_variant(Integer(), "sqlite")
"""64-bit ids; on SQLite an INTEGER so that it aliases the rowid and autoincrements."""


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {datetime: UtcDateTime(), dict[str, Any]: JSON()}


class Serial(Base):
    """The counter behind job serials. Writers increment it first in their transaction, so the
    row lock orders them: serials are handed out in commit order, even on PostgreSQL."""

    __tablename__ = "serials"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)


class Quota(Base):
    __tablename__ = "quotas"
    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    parent: Mapped[str | None] = mapped_column(
        String(NAME), ForeignKey("quotas.name", ondelete="CASCADE"), index=True
    )
    position: Mapped[int] = mapped_column(Integer, default=0)
    spec: Mapped[dict[str, Any]]
    """The node's ``QuotaSpec`` without its children (they are rows of their own)."""
    updated_at: Mapped[datetime]


class Queue(Base):
    __tablename__ = "queues"
    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    quota: Mapped[str | None] = mapped_column(String(NAME))
    weight: Mapped[float] = mapped_column(Float)
    spec: Mapped[dict[str, Any]]
    updated_at: Mapped[datetime]


class Cluster(Base):
    __tablename__ = "clusters"
    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    backend: Mapped[str] = mapped_column(String(64))
    labels: Mapped[dict[str, Any]]
    spec: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str | None] = mapped_column(Text)
    """Why an unreachable cluster is so (migration 0008): its backend could not be built from
    its settings, or stopped answering. Never a secret's value; None while ready."""
    heartbeat_at: Mapped[datetime | None]
    updated_at: Mapped[datetime]


class Node(Base):
    __tablename__ = "nodes"
    cluster: Mapped[str] = mapped_column(
        String(NAME), ForeignKey("clusters.name", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    resources: Mapped[dict[str, Any]]
    labels: Mapped[dict[str, Any]]
    spec: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(String(32))
    heartbeat_at: Mapped[datetime | None]


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index(None, "queue", "name", "submit_serial"),
        Index(None, "queue", "submit_serial"),
        Index(None, "state", "submit_serial"),
        # Partial: most jobs have neither, and every job update writes each index's entry
        # (migration 0006).
        *(
            Index(
                None,
                column,
                postgresql_where=text(f"{column} IS NOT NULL"),
                sqlite_where=text(f"{column} IS NOT NULL"),
            )
            for column in ("owner", "array_id")
        ),
    )
    id: Mapped[str] = mapped_column(String(ID), primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME))
    queue: Mapped[str] = mapped_column(String(NAME))
    """The queue's name; no foreign key: a queue with only finished jobs may be deleted, and
    its jobs keep the name (migration 0007)."""
    spec: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(String(32))
    priority: Mapped[int] = mapped_column(Integer)
    submitted_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    submit_serial: Mapped[int] = mapped_column(BigInteger, unique=True)
    serial: Mapped[int] = mapped_column(BigInteger, unique=True)
    labels: Mapped[dict[str, Any]]
    owner: Mapped[str | None] = mapped_column(String(NAME))
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    reason: Mapped[str] = mapped_column(Text, default="")
    not_before: Mapped[datetime | None]
    """A queued job waiting out its retry backoff is not scheduled before this time."""
    array_id: Mapped[str | None] = mapped_column(String(ID))
    """The array this job is an element of (``JobSpec.array``), with its index."""
    array_index: Mapped[int | None] = mapped_column(Integer)
    run_id: Mapped[str | None] = mapped_column(String(ID))
    """The latest run (no foreign key: runs reference jobs, and a cycle would complicate
    creation order; the store writes both in one transaction)."""
    dependencies: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, default=None)
    """``depends_on`` resolved at submission: ``[{"job_id", "job", "condition"}]``; null
    when the job waits for nobody."""


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("job_id", "attempt"),)
    id: Mapped[str] = mapped_column(String(ID), primary_key=True)
    job_id: Mapped[str] = mapped_column(String(ID), ForeignKey("jobs.id"))
    attempt: Mapped[int] = mapped_column(Integer)
    cluster: Mapped[str] = mapped_column(String(NAME), index=True)
    assignment: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    exit_code: Mapped[int | None] = mapped_column(Integer)
    message: Mapped[str | None] = mapped_column(Text)
    last_checkpoint_at: Mapped[datetime | None]
    """When the run last reported "checkpointed now" (``flotilla.checkpoint()``): the work a
    preemption would throw away starts here. Null: it never reported one (migration 0010)."""
    cpu_seconds: Mapped[float | None] = mapped_column(Float)
    """CPU seconds (user + system) its processes used, summed over its replicas, as its backend
    measured it when it ended (Slurm's ``TotalCPU``). Null: not measured (migration 0011)."""
    memory_peak: Mapped[int | None] = mapped_column(BigInteger)
    """The largest peak memory of any one of its replicas, bytes (Slurm's ``MaxRSS``). Null:
    not measured (migration 0011)."""


class RunGpuUse(Base):
    """A run's GPU use as its backend last measured it (migration 0009; ``model/gpu_use.py``):
    one row per run that held a GPU and was sampled, rewritten on every report."""

    __tablename__ = "run_gpu_use"
    run_id: Mapped[str] = mapped_column(String(ID), primary_key=True)
    memory_used: Mapped[int] = mapped_column(BigInteger)
    memory_peak: Mapped[int] = mapped_column(BigInteger)
    utilization: Mapped[float | None] = mapped_column(Float)
    held_gpu_seconds: Mapped[float] = mapped_column(Float)
    used_gpu_seconds: Mapped[float] = mapped_column(Float)
    samples: Mapped[int] = mapped_column(Integer)
    sampled_at: Mapped[datetime | None]


class Event(Base):
    """A job's history. No foreign keys (migration 0006): the store writes each event with its
    job and run in one transaction and never deletes either, and checking them cost a third
    of a batch's event insert on PostgreSQL."""

    __tablename__ = "events"
    __table_args__ = (Index(None, "job_id", "id"),)
    id: Mapped[int] = mapped_column(Big, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(ID))
    run_id: Mapped[str | None] = mapped_column(String(ID))
    time: Mapped[datetime]
    kind: Mapped[str] = mapped_column(String(32))
    from_state: Mapped[str | None] = mapped_column(String(32))
    to_state: Mapped[str | None] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text)


class LeaseRow(Base):
    """Leader election: one row per lease name; ``fencing_token`` grows on every hand-over."""

    __tablename__ = "leases"
    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    holder: Mapped[str] = mapped_column(String(NAME))
    expires_at: Mapped[datetime]
    fencing_token: Mapped[int] = mapped_column(BigInteger)
    acquired_at: Mapped[datetime]
    renewed_at: Mapped[datetime]


class FleetRow(Base):
    """The fleet in force (one row, ``name = "current"``): the fleet file as applied, secret
    references unresolved — never a secret's value. ``version`` grows on every apply; each
    replica reloads its backends and settings when it sees a new one."""

    __tablename__ = "fleet"
    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger)
    document: Mapped[dict[str, Any]]
    applied_at: Mapped[datetime]


class OwnerUidRow(Base):
    """The uid each owner's local jobs run as on a server that gives uids from a range
    (``flotilla.model.owner_uids``, migration 0012): assigned at an owner's first run, kept
    for good; a uid belongs to one owner only."""

    __tablename__ = "owner_uids"
    owner: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    uid: Mapped[int] = mapped_column(BigInteger, unique=True)
    assigned_at: Mapped[datetime]
