"""Initial schema: every table of flotilla.store.schema, and the job serial counter.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "clusters",
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("backend", sa.String(length=64), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_clusters")),
    )
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("holder", sa.String(length=253), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fencing_token", sa.BigInteger(), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leases")),
    )
    op.create_table(
        "queues",
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("quota", sa.String(length=253), nullable=True),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_queues")),
    )
    op.create_table(
        "quotas",
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("parent", sa.String(length=253), nullable=True),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["parent"], ["quotas.name"], name=op.f("fk_quotas_parent_quotas"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_quotas")),
    )
    op.create_index(op.f("ix_quotas_parent"), "quotas", ["parent"], unique=False)

    op.create_table(
        "serials",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_serials")),
    )
    serials = sa.table("serials", sa.column("name", sa.String), sa.column("value", sa.BigInteger))
    op.bulk_insert(serials, [{"name": "jobs", "value": 0}])
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("queue", sa.String(length=253), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("submit_serial", sa.BigInteger(), nullable=False),
        sa.Column("serial", sa.BigInteger(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("owner", sa.String(length=253), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=True),
        sa.ForeignKeyConstraint(["queue"], ["queues.name"], name=op.f("fk_jobs_queue_queues")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("queue", "name", name=op.f("uq_jobs_queue_name")),
        sa.UniqueConstraint("serial", name=op.f("uq_jobs_serial")),
        sa.UniqueConstraint("submit_serial", name=op.f("uq_jobs_submit_serial")),
    )
    op.create_index(op.f("ix_jobs_owner"), "jobs", ["owner"], unique=False)
    op.create_index(
        op.f("ix_jobs_queue_submit_serial"), "jobs", ["queue", "submit_serial"], unique=False
    )
    op.create_index(
        op.f("ix_jobs_state_submit_serial"), "jobs", ["state", "submit_serial"], unique=False
    )

    op.create_table(
        "nodes",
        sa.Column("cluster", sa.String(length=253), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("resources", sa.JSON(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["cluster"],
            ["clusters.name"],
            name=op.f("fk_nodes_cluster_clusters"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("cluster", "name", name=op.f("pk_nodes")),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("job_id", sa.String(length=36), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("cluster", sa.String(length=253), nullable=False),
        sa.Column("assignment", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_runs_job_id_jobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("job_id", "attempt", name=op.f("uq_runs_job_id_attempt")),
    )
    op.create_index(op.f("ix_runs_cluster"), "runs", ["cluster"], unique=False)

    op.create_table(
        "events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("job_id", sa.String(length=36), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=True),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("from_state", sa.String(length=32), nullable=True),
        sa.Column("to_state", sa.String(length=32), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_events_job_id_jobs")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_events_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    op.create_index(op.f("ix_events_job_id_id"), "events", ["job_id", "id"], unique=False)


def downgrade() -> None:
    for table in (
        "events",
        "runs",
        "nodes",
        "jobs",
        "serials",
        "quotas",
        "queues",
        "leases",
        "clusters",
    ):
        op.drop_table(table)
