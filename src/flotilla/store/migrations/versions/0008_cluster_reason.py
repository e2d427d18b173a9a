"""An unreachable cluster keeps why it is so in the database: ``clusters.reason``.

The reason (a secret reference that does not resolve, a setting of the wrong type, a backend
that stopped answering) was held in the memory of the scheduler that found it, so a
``flotilla serve`` over the same database showed ``reason: null``. It never holds a secret's
value (the scheduler hides every secret of the cluster's settings in it first).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("clusters") as batch:
        batch.add_column(sa.Column("reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("clusters") as batch:
        batch.drop_column("reason")
