"""Job names are unique among a queue's unfinished jobs only: a finished job's name may be
used again (resubmitting a job file), so the unique constraint on (queue, name) becomes an
index that finds the latest job of a name.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(op.f("uq_jobs_queue_name"), type_="unique")
        batch.create_index(
            op.f("ix_jobs_queue_name_submit_serial"), ["queue", "name", "submit_serial"]
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index(op.f("ix_jobs_queue_name_submit_serial"))
        batch.create_unique_constraint(op.f("uq_jobs_queue_name"), ["queue", "name"])
