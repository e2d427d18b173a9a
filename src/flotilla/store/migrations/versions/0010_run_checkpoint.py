"""A run's reported checkpoint (issue 28): ``runs.last_checkpoint_at``.

When the job last said "checkpointed now" (``flotilla.checkpoint()`` touches the file its
backend names in ``FLOTILLA_CHECKPOINT_FILE``; the backend reports the file's time). Victim
selection counts the work a preemption loses from there. Null: no checkpoint reported.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("last_checkpoint_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("last_checkpoint_at")
