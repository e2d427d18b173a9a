"""Leaner job writes: the owner and array indexes hold only jobs that have one, and events no
longer check foreign keys.

Every change of a job rewrites an entry in each index of ``jobs`` (its serial changes, so no
update is heap-only), and most jobs have no owner and no array: partial indexes (``WHERE …
IS NOT NULL``) skip those entries, and every query that uses them compares the column to a
value, which implies the predicate. Each event row checked two foreign keys (a lookup of its
job and of its run per row, a third of a 1,000-event insert on PostgreSQL); the store is the
only writer of events and writes each with its job and run in one transaction, and jobs and
runs are never deleted. Figures: ``docs/performance.md``, "Third pass: PostgreSQL".

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

PARTIAL = ("owner", "array_id")


def upgrade() -> None:
    for column in PARTIAL:
        name = op.f(f"ix_jobs_{column}")
        op.drop_index(name, table_name="jobs")
        where = sa.text(f"{column} IS NOT NULL")
        op.create_index(
            name, "jobs", [column], unique=False, postgresql_where=where, sqlite_where=where
        )
    with op.batch_alter_table("events") as batch:
        batch.drop_constraint(batch.f("fk_events_job_id_jobs"), type_="foreignkey")
        batch.drop_constraint(batch.f("fk_events_run_id_runs"), type_="foreignkey")


def downgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.create_foreign_key(batch.f("fk_events_run_id_runs"), "runs", ["run_id"], ["id"])
        batch.create_foreign_key(batch.f("fk_events_job_id_jobs"), "jobs", ["job_id"], ["id"])
    for column in PARTIAL:
        name = op.f(f"ix_jobs_{column}")
        op.drop_index(name, table_name="jobs")
        op.create_index(name, "jobs", [column], unique=False)
